"""The one table builder (cli/render/table.py): every cell escaped at its boundary; at a terminal's width flex
columns cut first, then ``hide`` columns moved whole below their row, a ``spill`` cell written whole below it,
the last column wrapped; piped, one line per row; too narrow for whole columns, cells folded."""

from __future__ import annotations

from jitwarden.cli import render as out


def test_names_are_escaped_at_the_cell_boundary():
    g = out.Grid([out.Column("ID"), out.Column("WHY", flex=True)])
    g.add("evil[/bold]", "a\x1b[31mred\nline", details=["tab\there [bold]x[/bold]"])
    text = g.plain(None)
    assert (
        "evil[/bold]" in text and "\\x1b[31mred\\nline" in text and "\\there [bold]x[/bold]" in text
    )
    assert "\x1b" not in text and "\n" not in text.split("\n", 1)[1].split("\n")[0]
    # Through rich: markup in a name is printed as it is, never read as markup (no MarkupError, no styling).
    from rich.console import Console

    con = Console(record=True, width=80, color_system=None, force_terminal=True)
    con.print(g)
    con.print(out.text("root ", ("evil[/bold] [red]x", "bold")))
    shown = con.export_text()
    assert "evil[/bold]" in shown and "[red]x" in shown


def test_grid_cuts_only_flex_columns_and_wraps_the_last():
    g = out.Grid(
        [
            out.Column("ID"),
            out.Column("NAME", flex=True, min=6),
            out.Column("VALUE", wrap=True, min=10),
        ]
    )
    g.add("ABCDEFGHIJKL", "a_rather_long_kernel_name_indeed", "word " * 30)
    lines = g.plain(60).splitlines()
    assert all(len(l) <= 60 for l in lines)
    assert lines[1].startswith("ABCDEFGHIJKL  ") and "…" in lines[1]
    assert len(lines) > 2 and lines[2].startswith(" " * 20)
    assert g.plain(None).count("\n") == 1  # no width: one line per row


def test_a_table_too_wide_to_cut_folds_its_cells_and_still_fits():
    """Eight whole columns (the canary's) cannot be cut to 40 columns: the cells fold onto more lines instead."""
    from rich.console import Console

    g = out.Grid(
        [
            out.Column("KERNEL"),
            out.Column("DTYPE"),
            out.Column("MAX ABS ERR", right=True),
            out.Column("STATUS"),
            out.Column("DETAILS", wrap=True),
        ]
    )
    g.add(
        "atomic-hist",
        "float8_e4m3",
        "2.1e+06",
        ("FAIL", "bold red"),
        "pass 2 (cache): [bold]out[/bold] of tolerance",
    )
    assert not g.fits(40) and g.fits(None) and g.fits(200)
    con = Console(record=True, width=40, color_system=None, force_terminal=True)
    con.print(g)
    shown = con.export_text()
    assert all(len(line) <= 40 for line in shown.splitlines()), shown
    assert "[bold]" in "".join(shown.split())  # folded, never read as markup
    assert (
        g.plain(None).splitlines()[1].startswith("atomic-hist  float8_e4m3")
    )  # piped: one line per row


def _rows(g, width):
    return g.plain(width).splitlines()


def test_hide_columns_move_whole_below_their_row_lowest_first():
    g = out.Grid(
        [
            out.Column("ID"),
            out.Column("STATUS"),
            out.Column("TYPE", hide=2),
            out.Column("SIZE", right=True, hide=1),
            out.Column("ROOT", flex=True, cut="middle", min=12),
        ]
    )
    g.add("c0ffee01", "ok", "kernel", "26.6 KiB", "/home/user/.triton/cache/jitwarden-v1/*deadbeef")
    natural = _rows(g, None)
    assert len(natural) == 2 and natural[1].startswith("c0ffee01  ok      kernel  26.6 KiB  /home")
    lay = g.layout(40)
    assert lay.fits and lay.hidden and lay.shown == (0, 1, 2, 4)  # SIZE (hide=1) went first
    lines = _rows(g, 40)
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].startswith("c0ffee01  ok      kernel  /h") and "…" in lines[1]
    assert lines[1].endswith("*deadbeef")  # cut in the middle: the partition's mark stays
    assert lines[2] == "    size: 26.6 KiB"  # moved whole, never cut
    narrow = _rows(g, 30)  # both moved, the line broken between them: a piece is never split
    assert narrow[2:] == ["    type: kernel", "    size: 26.6 KiB"]


def test_a_spill_cell_cut_in_the_row_is_written_whole_below_it():
    g = out.Grid([out.Column("ID"), out.Column("KERNEL", spill=True, min=8), out.Column("SM")])
    name = "triton_poi_fused_add_mul_sigmoid_0"
    g.add("c0ffee01", name, "90")
    g.add("c0ffee02", "short", "90")
    lines = _rows(g, 30)
    assert (
        len(lines[1]) <= 30
        and lines[1].startswith("c0ffee01  triton_")
        and "…" in lines[1]
        and lines[1].endswith("90")
    )
    assert lines[2] == f"    kernel: {name}"  # whole, to copy, however wide
    assert lines[3].startswith("c0ffee02  short") and len(lines) == 4  # nothing cut: nothing spilt


def test_cells_none_are_a_dash_and_numbers_align_right():
    g = out.Grid([out.Column("NAME"), out.Column("SIZE", right=True)])
    g.add("a", "1 B")
    g.add(None, "12.5 MiB")
    assert _rows(g, None) == ["NAME      SIZE", "a          1 B", "-     12.5 MiB"]


def test_details_wrap_indented_on_their_own_lines():
    g = out.Grid([out.Column("ID"), out.Column("WHY")])
    g.add("c0ffee01", "mismatch", details=["cubin sm_80 " * 8])
    lines = _rows(g, 40)
    assert lines[1] == "c0ffee01  mismatch"
    assert len(lines) > 3 and all(line.startswith("    ") and len(line) <= 40 for line in lines[2:])
    assert len(_rows(g, None)) == 3  # piped: one detail line, whole
