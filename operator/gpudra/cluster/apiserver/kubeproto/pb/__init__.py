"""Generated protobuf modules; do not edit. Regenerate with: python -m gpudra.cluster.apiserver.kubeproto.codegen"""
