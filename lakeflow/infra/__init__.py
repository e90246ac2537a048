"""The lake's permission model: what each lakeflow role may do to which keys, as data.

`model` states the grants (derived from `lakeflow.lake.layout`), `policy` renders them as IAM
policy documents (for Terraform, MinIO or by hand), `evaluate` checks requests against a
document and builds the role x action table that docs/security.md shows.
"""

from lakeflow.infra.evaluate import PROBES, Probe, allowed, probe_table
from lakeflow.infra.model import GRANTS, ROLES, Grant, grants_for
from lakeflow.infra.policy import lake_root, policy_document, template_document

__all__ = [
    "GRANTS",
    "PROBES",
    "ROLES",
    "Grant",
    "Probe",
    "allowed",
    "grants_for",
    "lake_root",
    "policy_document",
    "probe_table",
    "template_document",
]
