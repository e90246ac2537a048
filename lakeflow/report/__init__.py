"""The run report: an HTML page with PNG plots of a lake, for a person to read first.

`data` gathers the numbers (testable without plotting), `plots` draws them with matplotlib
(the `report` extra), `html` writes the page. Reads the lake only; never writes to it.
"""

from lakeflow.report.html import write_report

__all__ = ["write_report"]
