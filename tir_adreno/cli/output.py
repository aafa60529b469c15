"""How the CLI prints results: tables as wide as their cells, sizes in the unit that shows them."""

from __future__ import annotations


def table(rows: list[dict], columns: dict[str, str], titles: dict[str, str] | None = None) -> str:
    """``rows`` as a text table, each column as wide as its widest cell; ``columns``: key ->
    alignment ("<" or ">") and format (".1f"); ``titles``: a header other than the key."""
    titles = {key: (titles or {}).get(key, key) for key in columns}
    cells = [[format(r[key], spec[1:]) for key, spec in columns.items()] for r in rows]
    widths = [max([len(titles[key])] + [len(c[i]) for c in cells]) for i, key in enumerate(columns)]
    aligns = [spec[0] for spec in columns.values()]
    lines = [[titles[key] for key in columns], *cells]
    return "\n".join("  ".join(f"{c:{a}{w}}" for c, a, w in zip(line, aligns, widths)).rstrip() for line in lines)


def size(nbytes: float) -> str:
    """``nbytes`` in the unit that shows it (``512 B``, ``3.4 KiB``, ``52.5 MiB``): a small model is not "0.0 MiB"."""
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"
