"""`edgekit report --studies`: algorithm studies as a report section, checked against the schema."""

import jsonschema
import pytest

from edgekit.jobs.report import check_plan, run_studies
from edgekit.report_output import schema, study_rows


def test_unknown_study_is_refused_before_any_work():
    with pytest.raises(ValueError, match="unknown study 'mcmc'; studies: dcla, comparison_oracle, usable_information"):
        check_plan(["digits"], ["mxfp4"], ["host"], study_names=["mcmc"])
    assert check_plan(["digits"], ["mxfp4"], ["host"], study_names=["dcla", "dcla"]).studies == ["dcla"]


def test_study_section_matches_the_schema_and_renders_headline_first():
    rows = run_studies(["comparison_oracle"], "tiny", log=lambda msg: None)
    full = schema()
    jsonschema.validate(rows, {"$defs": full["$defs"], **full["properties"]["studies"]})
    assert rows[0]["results"]["estimator_queries"] == rows[0]["results"]["estimator_bound"]
    table = study_rows({"studies": rows})
    assert table[0]["result"] == "estimator_error" and table[0]["headline"] == "yes"
    assert len(table) == len(rows[0]["results"])
