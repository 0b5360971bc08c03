"""The published values in tests/data (REFERENCE.md), reproduced by evaluate() (span, within 0.5)."""

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


# The Zero Bubble authors' published ZB-V scheduler, run outside this repository on each setting below with
# f_mem = m_b = 2, b_mem = -1, w_mem = -1 and its default max_mem (1F1B's peak); its order
# timed by evaluate() gives these spans (the order itself matched zb-v's pass for pass on
# 600 random settings of p <= 8, costs 0..9, comm 0..4).
AUTHORS_ZBV = [
    # (p, m, t_f, t_b, t_w, comm), span, device 0's first passes
    ((4, 12, 3, 4, 2, 0), 226, "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7B0 7W0 7F1 7B1 7W1 7F2"),
    ((3, 2, 2, 1, 1, 1), 31, "0F0 0F1 5F0 5B0 5W0 5F1 5B1 5W1 0B0 0W0 0B1 0W1"),
    ((6, 10, 1, 3, 1, 0), 119, None),
    ((8, 24, 18522, 18086, 9337, 601), 2346803, None),
    ((16, 48, 3, 4, 2, 1), 1010, None),
    ((16, 64, 5, 6, 4, 1), 2064, None),
]


@pytest.mark.parametrize("setting,span,device0", AUTHORS_ZBV)
def test_zb_v_is_the_authors_scheduler(setting, span, device0):
    p, m, t_f, t_b, t_w, comm = setting
    instance = Instance(devices=p, microbatches=m, placement="v", t_f=t_f, t_b=t_b, t_w=t_w,
                        comm=comm, m_b=2, m_w=1, memory_cap="1p")
    timeline = evaluate(instance, generate("zb-v", instance))
    assert timeline.span == span
    assert timeline.fits_cap  # the authors' scheduler keeps 1F1B's memory
    if device0:
        assert " ".join(timeline.schedule.text()[0]).startswith(device0)
    greedy = evaluate(instance, generate("v-greedy", instance))
    assert greedy.fits_cap and greedy.span <= timeline.span
