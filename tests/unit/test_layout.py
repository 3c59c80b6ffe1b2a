"""The source root must not be a package: `operator/__init__.py` would shadow the standard library's operator."""

from pathlib import Path

from sourcekit import parse_file

ROOT = Path(__file__).resolve().parents[2]


def test_operator_dir_is_not_a_package() -> None:
    assert (ROOT / "operator" / "gpudra" / "__init__.py").exists()
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_stdlib_operator_module_is_not_shadowed() -> None:
    import operator

    assert hasattr(operator, "itemgetter")


def _imported_modules(path: Path) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_module_imports_another() -> None:
    """What several tests share lives in kit modules (``_*_kit.py``, ``clusterkit``, conftest), so that a test
    module can be moved, renamed or run alone (pytest imports test modules by base name)."""
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.rglob("test_*.py")}
    offenders = {
        f"{p.relative_to(tests)} imports {', '.join(sorted(bad))}"
        for p in tests.rglob("*.py")
        if "node_modules" not in p.parts and (bad := _imported_modules(p) & test_modules)
    }
    assert not offenders, sorted(offenders)
