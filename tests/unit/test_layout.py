"""The source root must not be a package: `operator/__init__.py` would shadow the standard library's operator."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operator_dir_is_not_a_package() -> None:
    assert (ROOT / "operator" / "gpudra" / "__init__.py").exists()
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_stdlib_operator_module_is_not_shadowed() -> None:
    import operator

    assert hasattr(operator, "itemgetter")
