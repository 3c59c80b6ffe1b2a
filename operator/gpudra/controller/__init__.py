"""The controller: kopf handlers that reconcile gpudra's objects and explain pending claims."""
