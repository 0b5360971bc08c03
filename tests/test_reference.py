"""The published values of shared/reference, reproduced by evaluate() (span, within 0.5)."""

import pytest

from zbopt.families import generate
from zbopt.instance import Instance
from zbopt.schedule import evaluate, validate


def paper_instance(row) -> Instance:
    return Instance(devices=row["p"], microbatches=row["m"], t_f=row["t_f"], t_b=row["t_b"],
                    t_w=row["t_w"], comm=row["comm"], m_b=row["m_b"], m_w=row["m_w"])


@pytest.mark.parametrize("family,column", [("1f1b", "1f1b"), ("zb-h1", "zb_h1"),
                                           ("zb-h2", "zb_h2")])
def test_paper_table5_contiguous(paper_rows, family, column):
    for row in paper_rows:
        instance = paper_instance(row)
        schedule = generate(family, instance)
        assert validate(instance.with_cap(None), schedule) == []
        timeline = evaluate(instance, schedule)
        assert timeline.span == pytest.approx(row[column], abs=0.5), (row["model"], row["m"])
        assert timeline.ideal == pytest.approx(row["ideal"], abs=0.5)


def test_paper_table5_interleaved(paper_rows):
    for row in paper_rows:
        instance = paper_instance(row).with_placement("interleaved", row["v_interleaved"])
        assert instance.chunks == row["v_interleaved"]
        timeline = evaluate(instance, generate("interleaved-1f1b", instance))
        assert timeline.span == pytest.approx(row["1f1b_interleaved"], abs=0.5)


@pytest.mark.parametrize("family,column", [("1f1b", "1f1b"), ("zb-h1", "zb_h1"),
                                           ("zb-h2", "zb_h2")])
def test_unit_cost_grid(unit_grid, family, column):
    for row in unit_grid:
        instance = Instance(devices=row["p"], microbatches=row["m"], m_b=2, m_w=1)
        assert evaluate(instance, generate(family, instance)).span == row[column], row


def test_memory_of_handwritten_families_on_paper_setting(paper_rows):
    # 1F1B and ZB-H1 fit "1p" (their peak is p activations on device 0); ZB-H2 does not
    row = paper_rows[0]
    instance = paper_instance(row).with_cap("1p")
    assert evaluate(instance, generate("1f1b", instance)).fits_cap
    assert evaluate(instance, generate("zb-h1", instance)).fits_cap
    assert not evaluate(instance, generate("zb-h2", instance)).fits_cap
