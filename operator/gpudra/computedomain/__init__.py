"""Pure: the desired children and the observed status of a ComputeDomain, and the IMEX facts behind them.

No I/O and no awaits; every function maps models (or wire dicts) to models. Modules:
``names`` (names, labels and driver names shared by the others), ``children`` (the objects the controller
applies for a domain), ``index`` (daemon indices within a clique, channel leases, which domains may share a
node), ``status`` (status.nodes, status.status, conditions, and the minimal status patch), ``channels``
(the devices the compute-domain kubelet plugin publishes and what it injects for a prepared channel).
"""
