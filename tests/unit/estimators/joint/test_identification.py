"""Which joint cells are published as identified (``ldpstream.estimators.joint.identification``;
docs/math/joint.md#cells-the-reports-do-not-identify): the rules on their own, then through ``estimate_joint``
for each mechanism family, and in the published JSON against its schema."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.estimators.joint import JointVariable, estimate_joint
from ldpstream.estimators.joint.identification import VariableIdentification, identified_cells
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.simulation.joint_trials import sample_pairs, value_names, zipf_association
from tests.published_schema import validate

HASHED_BITS_DICT = VariableIdentification(other=True, hashed=True, bits=True, frequency_source="dictionary")
HASHED_BITS_LS = VariableIdentification(other=True, hashed=True, bits=True, frequency_source="least-squares")
DIRECT_LS = VariableIdentification(other=True, hashed=False, bits=False, frequency_source="least-squares")
SYMBOLS_GIVEN = VariableIdentification(other=True, hashed=True, bits=False, frequency_source="given")
#: A boolean-like member: no Other category, so no Other x Other cell.
NO_OTHER = VariableIdentification(other=False, hashed=True, bits=True, frequency_source="least-squares")


def test_a_well_determined_frequency_source_leaves_every_cell_identified():
    cells = identified_cells((6, 2), HASHED_BITS_DICT, NO_OTHER)
    assert cells.all and cells.reasons == ()
    assert identified_cells((2, 6), NO_OTHER, DIRECT_LS).all


@pytest.mark.parametrize("source", ["least-squares", "self-consistent"])
def test_candidates_only_frequencies_of_a_hashed_member_flag_every_cell(source):
    hashed = VariableIdentification(other=True, hashed=True, bits=True, frequency_source=source)
    for x, y, name in ((hashed, NO_OTHER, "X"), (NO_OTHER, hashed, "Y")):
        cells = identified_cells((3, 4), x, y)
        assert cells.mask.shape == (3, 4) and not cells.mask.any()
        assert len(cells.reasons) == 1 and cells.reasons[0].startswith(f"{name}:")


def test_a_member_without_other_needs_no_frequencies():
    boolean = VariableIdentification(other=False, hashed=True, bits=True, frequency_source="least-squares")
    assert identified_cells((6, 2), HASHED_BITS_DICT, boolean).all


def test_two_members_whose_other_holds_several_values_flag_every_cell():
    cells = identified_cells((6, 6), SYMBOLS_GIVEN, SYMBOLS_GIVEN)
    assert not cells.mask.any() and len(cells.reasons) == 1
    direct = VariableIdentification(other=True, hashed=False, bits=False, frequency_source="least-squares",
                                    hidden_values=95)
    assert not identified_cells((6, 6), direct, direct).mask.any()
    assert not identified_cells((6, 6), direct, SYMBOLS_GIVEN).mask.any()
    # An Other of one value has an exact law: the product is exact.
    single = VariableIdentification(other=True, hashed=False, bits=False, frequency_source="least-squares",
                                    hidden_values=1)
    assert identified_cells((6, 3), direct, single).all
    # Bit mechanisms alike (32-bit RAPPOR with its dictionary: 0.875 at 10^6 pairs).
    assert not identified_cells((6, 6), HASHED_BITS_DICT, HASHED_BITS_DICT).mask.any()
    # Without Other on one side there is no Other x Other cell.
    boolean = VariableIdentification(other=False, hashed=True, bits=False, frequency_source="given")
    assert identified_cells((6, 2), SYMBOLS_GIVEN, boolean).all


def _pairs(mx, my, names, n=20_000, support=100):
    joint = zipf_association(support, 1.0, 0.5)
    tx = None if names is None else mx.value_table(names)
    ty = None if names is None else my.value_table(names)
    return sample_pairs(joint, mx, my, n, np.random.default_rng(5), tx, ty)


def test_rappor_frequencies_are_identified_with_a_well_determined_dictionary_and_not_without_it():
    names = value_names(100)
    wide = Rappor(k=32, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0)  # 101 columns, 256 cells
    pairs, var = _pairs(wide, wide, names), JointVariable(wide, names[:5], dictionary=names)
    # The EM: only the Other x Other rule (both members have an open Other) flags it.
    est = estimate_joint(pairs, var, var, inversion=False)
    assert est.info["frequencies_x"] == "dictionary" and len(est.identification) == 1
    assert not est.identified_mask().any() and est.identification[0].startswith("both members")
    # The inversion against the well-determined dictionary (shipped) identifies every cell.
    est = estimate_joint(pairs, var, var)
    assert est.info["estimator"] == "dictionary-inversion" and est.identified_mask().all()
    assert est.interval_method == "wald-clipped-inversion"
    narrow = Rappor(k=16, hashes=2, cohorts=8, p=0.25, q=0.75, f=0.0)  # 101 columns, 128 cells: not
    est = estimate_joint(_pairs(narrow, narrow, names), JointVariable(narrow, names[:5], dictionary=names),
                         JointVariable(narrow, names[:5], dictionary=names))
    assert est.info["frequencies_x"] == "least-squares" and not est.identified_mask().any()
    assert est.to_dict()["identified"] == [[False] * 6] * 6 and len(est.to_dict()["identification"]) == 3


def test_krr_is_identified_by_the_full_alphabet_and_two_orr_members_are_not():
    krr = KRR(k=100, epsilon=4.0)
    pairs = _pairs(krr, krr, None)
    x, y = JointVariable(krr, list(range(5))), JointVariable(krr, list(range(5)))
    # 95 hidden values each, but known ones: the inversion of the full alphabets identifies every cell.
    est = estimate_joint(pairs, x, y)
    assert est.identified_mask().all() and est.identification == ()
    assert est.interval_method == "wald-clipped-inversion" and est.info["estimator"] == "direct-inversion"
    # The EM with its product Other x Other law (the comparison) is what rule 2 flags.
    em = estimate_joint(pairs, x, y, inversion=False)
    assert not em.identified_mask().any() and len(em.identification) == 1 and em.info["estimator"] == "em"
    est = estimate_joint(pairs, JointVariable(krr, list(range(5))), JointVariable(krr, list(range(99))))
    assert est.identified_mask().all() and est.identification == ()  # X's Other holds 95 values: inversion too
    small = KRR(k=6, epsilon=4.0)
    est = estimate_joint(_pairs(small, small, None, support=6), JointVariable(small, list(range(5))),
                         JointVariable(small, list(range(5))))
    assert est.info["estimator"] == "em" and est.identified_mask().all()  # two Others of one value: the EM
    names = value_names(100)
    orr = ORR(k=32, epsilon=3.0, cohorts=8)
    est = estimate_joint(_pairs(orr, orr, names), JointVariable(orr, names[:5], dictionary=names),
                         JointVariable(orr, names[:5], dictionary=names), inversion=False)
    assert est.info["frequencies_x"] == "dictionary"
    assert not est.identified_mask().any()
    # Without a dictionary the hidden values are unknown: the EM, flagged.
    est = estimate_joint(_pairs(orr, orr, names), JointVariable(orr, names[:5]), JointVariable(orr, names[:5]))
    assert est.info["estimator"] == "em" and not est.identified_mask().any()


def test_the_published_joint_carries_the_flags_and_its_schema_allows_them():
    from ldpstream.decoder.published import PublishedJoint

    names = value_names(100)
    orr = ORR(k=32, epsilon=3.0, cohorts=8)
    est = estimate_joint(_pairs(orr, orr, names), JointVariable(orr, names[:5], dictionary=names),
                         JointVariable(orr, names[:5], dictionary=names), inversion=False)
    published = PublishedJoint("a", ("x", "y"), "all", 1.0, 0.1, 1, est, warm_start=False).to_json()
    validate(published, "joint-estimate/1")
    assert published["identified"] == [[False] * 6] * 6
    assert published["identification"] == list(est.identification) and len(est.identification) == 1
    assert set(published["fit"]) == {"x", "y"} and all(f["df"] > 0 for f in published["fit"].values())
    assert published["point"] == "maximum-likelihood"  # the EM's (inversion=False)
    older = {k: v for k, v in published.items() if k not in ("identified", "identification", "fit", "point")}
    validate(older, "joint-estimate/1")  # objects published before the field stay valid
    # ldpstream watch marks the cell and says why.
    from ldpstream.decoder.watch import render_joint

    text = render_joint(published, now=2.0)
    assert text.count("]?") == 36 and "? not identified" in text and est.identification[0] in text
    assert "x against its candidates, fit: dispersion" in text and "point: maximum-likelihood" in text
    assert "]?" not in render_joint(older, now=2.0)
    # Two direct members: every cell identified, the inversion's interval method in the schema.
    krr = KRR(k=100, epsilon=4.0)
    direct = estimate_joint(_pairs(krr, krr, None), JointVariable(krr, list(range(5))),
                            JointVariable(krr, list(range(5))))
    published = PublishedJoint("a", ("x", "y"), "all", 1.0, 0.1, 1, direct, warm_start=False).to_json()
    validate(published, "joint-estimate/1")
    assert published["identified"] == [[True] * 6] * 6 and published["identification"] == []
    assert published["point"] == ("projected" if direct.info["projected"] else "unbiased")
    text = render_joint(published, now=2.0)
    assert published["em"]["iterations"] == 0 and "]?" not in text and "closed form" in text and "EM:" not in text


def test_the_decoder_passes_a_closed_alphabet_as_the_dictionary_so_its_table_is_identified():
    """A closed O-RAPPOR alphabet has no candidate list; its every index is the dictionary (well-determined:
    41 columns, 16 cohorts × 16 bits), so the EM's frequencies are ``dictionary`` and only the Other x Other rule
    flags its table, and the shipped decode is the inversion against that dictionary, every cell identified."""
    from ldpstream.decoder.published import joint_variable
    from ldpstream.estimators.estimate import Estimate
    from ldpstream.registry import Registry

    registry = Registry.from_dict({"metrics": {
        "b": {"id": 2, "mechanism": "orappor", "k": 16, "epsilon": 2.0, "cohorts": 16, "hashes": 2, "support": 40}}})
    metric = registry["b"]
    z = zipf_association(40, 1.0, 0.5)
    marginal = Estimate(frequencies=z.sum(axis=1), std_errors=None, n_reports=1, method="test")
    var = joint_variable(metric, marginal, 5)
    assert list(var.dictionary or []) == list(range(40)) and list(var.values) == [0, 1, 2, 3, 4]
    pat = _pairs_closed(metric.mechanism, z)
    est = estimate_joint(pat, var, var, inversion=False)
    assert est.info["frequencies_x"] == "dictionary"
    assert [r.split(":")[0] for r in est.identification] == ["both members' Other holds several values"]
    est = estimate_joint(pat, var, var)
    assert est.info["estimator"] == "dictionary-inversion" and est.identified_mask().all()


def _pairs_closed(mech, joint, n=20_000):
    table = mech.value_table(list(range(joint.shape[0])))
    return sample_pairs(joint, mech, mech, n, np.random.default_rng(6), table, table)


def test_a_hashed_member_whose_list_misses_heavy_strings_flags_every_cell_and_says_why():
    """Identification rule 3, the review's case: O-RR k = 32, 8 cohorts, ε = 3, the strings ranked 6–19 (24% of the
    mass) off the dictionary, 2·10^5 pairs: the inversion against that dictionary is biased in every cell (0.888
    coverage there, 0.679 at 10^6), so every cell is flagged with the misfit that shows it; with the whole list,
    the same reports leave every cell identified."""
    names = value_names(100)
    orr = ORR(k=32, epsilon=3.0, cohorts=8)
    pairs = _pairs(orr, orr, names, n=200_000)
    listed = names[:5] + names[19:]
    short = JointVariable(orr, names[:5], dictionary=listed)
    est = estimate_joint(pairs, short, short)
    assert est.info["estimator"] == "dictionary-inversion"
    assert not est.identified_mask().any() and len(est.identification) == 2
    assert all(r.startswith(("X: its candidate list misses mass", "Y: its candidate list misses mass"))
               for r in est.identification)
    assert all(f is not None and f.rejected and f.excess_reports > 10_000 for f in est.fit)
    whole = JointVariable(orr, names[:5], dictionary=names)
    complete = estimate_joint(pairs, whole, whole)
    assert complete.identified_mask().all() and complete.identification == ()
    assert all(f is not None and not f.rejected for f in complete.fit)
    # a direct member has no list to miss: no misfit
    krr = KRR(k=100, epsilon=4.0)
    direct = estimate_joint(_pairs(krr, krr, None), JointVariable(krr, list(range(5))),
                            JointVariable(krr, list(range(5))))
    assert direct.fit == (None, None)


def test_a_projected_table_says_so_and_its_intervals_hold_the_point_about_the_unbiased_centre():
    """The review's case (k-RR × k-RR, k = 20, ε = 1, 2·10^4 pairs): the inversion has negative cells, so the
    published table is its projection (``point`` "projected"), every interval holds the published point and is
    centred on the unbiased table."""
    krr = KRR(k=20, epsilon=1.0)
    est = estimate_joint(_pairs(krr, krr, None, n=20_000, support=20), JointVariable(krr, list(range(5))),
                         JointVariable(krr, list(range(5))))
    assert est.point == "projected" and est.interval_center is not None
    assert np.all(est.interval_center.sum() == pytest.approx(1.0)) and est.interval_center.min() < 0
    assert np.all((est.low <= est.table + 1e-12) & (est.table <= est.high + 1e-12))
    free = (est.low > 0) & (est.high < 1)
    half = 1.959963984540054 * est.std_error
    outside = (est.table < est.interval_center - half) | (est.table > est.interval_center + half)
    # where the point lies inside the unbiased centre's interval, the interval is that one (the hull adds nothing)
    np.testing.assert_allclose(est.low[free & ~outside], (est.interval_center - half)[free & ~outside], atol=1e-12)
