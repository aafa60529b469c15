"""The README's "Layout of the code" names every module of the tree (it left out 13 and drifted
twice): each package's bullet (``- `tir_adreno/passes/`: ...``) names each of its modules and
subpackages in backticks (``rules/`` and the modules in it), and each top-level module of
``tir_adreno`` has a bullet of its own. A new module fails here until the README says what it is."""

import re

import pytest

from helpers import ROOT


def _bullets() -> dict[str, set[str]]:
    """Package or file path -> the backticked words of its bullet in the README's layout section."""
    section = (ROOT / "README.md").read_text().split("## Layout of the code", 1)[1].split("\n## ", 1)[0]
    bullets = {}
    for bullet in re.split(r"\n- ", section):
        head = re.match(r"`((?:tir_adreno|primfuncs)[\w/.]*)`", bullet)
        if head:
            bullets[head.group(1)] = set(re.findall(r"`([\w./]+)`", bullet))
    return bullets


PACKAGES = ["primfuncs/", *sorted(f"{p.parent.relative_to(ROOT)}/" for p in (ROOT / "tir_adreno").glob("*/__init__.py"))]


@pytest.mark.parametrize("package", PACKAGES)
def test_readme_names_every_module_of_the_package(package):
    bullets = _bullets()
    assert package in bullets, f"README's layout section has no bullet for `{package}`"
    root = ROOT / package
    modules = [f.relative_to(root) for f in sorted(root.rglob("*.py")) if f.parent != root or f.name != "__init__.py"]
    names = {str(m.parent) + "/" if m.name == "__init__.py" else m.stem for m in modules}
    missing = sorted(names - bullets[package])
    assert not missing, f"README's `{package}` bullet does not name {missing}"
    subpackages = {w for w in bullets[package] - {package} if w.endswith("/") and "/" not in w[:-1]}
    assert subpackages <= names, f"README's `{package}` bullet names packages that do not exist: {sorted(subpackages - names)}"


def test_readme_names_every_top_level_module():
    bullets = _bullets()
    files = sorted(f"tir_adreno/{f.name}" for f in (ROOT / "tir_adreno").glob("*.py"))
    missing = [f for f in files if f not in bullets]
    assert not missing, f"README's layout section has no bullet for {missing}"
    assert not [b for b in bullets if b.endswith(".py") and not (ROOT / b).is_file()]
