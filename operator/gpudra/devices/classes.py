"""The DeviceClasses gpudra installs: NVIDIA's names and CEL selectors, from the YAML shipped in this package.

The one deliberate read of this otherwise pure package: the canonical ``deviceclasses.yaml`` sits next to this
module (package data), so an installed gpudra finds it without the repository.
``manifests/base/deviceclasses.yaml`` is a copy of it for ``kubectl apply -f``; a unit test fails when the two
differ.
"""

from __future__ import annotations

from importlib import resources

import yaml
from pydantic import ValidationError

from gpudra.api.dra import DeviceClass
from gpudra.errors import ConfigurationError

DEVICE_CLASSES_FILE = "deviceclasses.yaml"
DEFAULT_GPU_DRIVER = "gpu.nvidia.com"
DEFAULT_COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"


def device_classes_text() -> str:
    """The canonical YAML, exactly as shipped."""
    return resources.files("gpudra.devices").joinpath(DEVICE_CLASSES_FILE).read_text(encoding="utf-8")


def _rename_driver(expression: str, default: str, actual: str) -> str:
    return expression if default == actual else expression.replace(f"'{default}'", f"'{actual}'")


def parse_device_classes(
    text: str,
    *,
    gpu_driver: str = DEFAULT_GPU_DRIVER,
    compute_domain_driver: str = DEFAULT_COMPUTE_DOMAIN_DRIVER,
) -> list[DeviceClass]:
    """DeviceClass models from a multi-document YAML text. With other driver names than NVIDIA's, the
    selectors are rewritten to match them (class names stay NVIDIA's). Raises ConfigurationError for anything
    that is not a list of valid DeviceClasses."""
    classes: list[DeviceClass] = []
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"the DeviceClass manifest is not valid YAML: {exc}") from exc
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != "DeviceClass":
            raise ConfigurationError(
                f"expected only DeviceClass objects in the manifest, found {document!r:.80}"
            )
        try:
            device_class = DeviceClass.from_wire(document)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid DeviceClass in the manifest: {exc}") from exc
        for selector in device_class.spec.selectors or ():
            if selector.cel is not None:
                expression = _rename_driver(selector.cel.expression, DEFAULT_GPU_DRIVER, gpu_driver)
                expression = _rename_driver(expression, DEFAULT_COMPUTE_DOMAIN_DRIVER, compute_domain_driver)
                selector.cel.expression = expression
        classes.append(device_class)
    return classes


def load_device_classes(
    *,
    gpu_driver: str = DEFAULT_GPU_DRIVER,
    compute_domain_driver: str = DEFAULT_COMPUTE_DOMAIN_DRIVER,
) -> list[DeviceClass]:
    """The shipped DeviceClasses, in file order: gpu, mig, vfio, compute-domain daemon, default channel."""
    return parse_device_classes(
        device_classes_text(), gpu_driver=gpu_driver, compute_domain_driver=compute_domain_driver
    )
