"""The renderer: every byte the CLI prints for a person or a program goes through here.

- :mod:`.output`: the output format chosen once from ``--format``, and the one JSON envelope;
- :mod:`.console`: the one console (markup off, NO_COLOR honoured) and lines from plain pieces;
- :mod:`.table`: the one table builder, every cell escaped;
- :mod:`.report`: views of a scan report (tables, JSON body, summary line) and short names;
- :mod:`.progress`: the progress bar engines receive as a plain callback.

Sizes and ages are written by :mod:`jitwarden.model.text`. See ARCHITECTURE.md for the layers.
"""

from jitwarden.cli.render.console import command, console, footer, hanging, no_color, text
from jitwarden.cli.render.output import (
    SCHEMA,
    JsonFormat,
    OutputFormat,
    Streamed,
    TableFormat,
    done_record,
    envelope,
    indented,
    output_format,
    plan_record,
    write_json,
)
from jitwarden.cli.render.progress import progress_bar
from jitwarden.cli.render.report import (
    SEVERITY_STYLE,
    caches_table,
    entries_json,
    entries_table,
    environment_json,
    environment_words,
    print_caches,
    print_overview,
    root_label,
    scan_json,
    scan_json_streamed,
    short_id,
    short_key,
    short_path,
    status_cell,
    summary_line,
    verdicts_words,
)
from jitwarden.cli.render.table import Column, Grid, Row

__all__ = [
    "SCHEMA",
    "SEVERITY_STYLE",
    "Column",
    "Grid",
    "JsonFormat",
    "OutputFormat",
    "Row",
    "Streamed",
    "TableFormat",
    "caches_table",
    "console",
    "entries_json",
    "indented",
    "scan_json_streamed",
    "done_record",
    "entries_table",
    "environment_json",
    "environment_words",
    "envelope",
    "plan_record",
    "command",
    "footer",
    "hanging",
    "no_color",
    "output_format",
    "print_caches",
    "print_overview",
    "progress_bar",
    "root_label",
    "scan_json",
    "short_id",
    "short_key",
    "short_path",
    "status_cell",
    "summary_line",
    "text",
    "verdicts_words",
    "write_json",
]
