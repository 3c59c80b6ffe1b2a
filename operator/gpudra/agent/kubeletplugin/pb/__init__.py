"""Generated protobuf and gRPC modules; do not edit. Regenerate with: python -m gpudra.agent.kubeletplugin.codegen"""
