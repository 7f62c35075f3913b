"""Apple's count-mean sketch (CMS), Apple Differential Privacy Team 2017, "Learning with privacy at scale"
(docs/math/mechanisms.md#cms).

A client picks one of ``cohorts`` hash functions j, sets the bucket h_j(x) of an m-bucket vector (m = ``k``),
and flips every entry independently with probability 1/(e^{ε/2} + 1). That is O-RAPPOR with one hash: two
inputs differ in two entries, each costing at most e^{ε/2} (ε-LDP, tight). Apple decodes with the count-mean
debiasing of the cohort rows (:func:`ldpstream.estimators.count_mean.count_mean`); ldpstream decodes the same
sketch by least squares against the candidates' hashes (O-RAPPOR's candidate decoders), which removes the
collisions' bias that the count mean keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.orappor import ORappor


@dataclass(frozen=True)
class CountMeanSketch(ORappor):
    """CMS: ``cohorts`` hash functions into ``k`` buckets at ``epsilon`` (``hashes`` must stay 1)."""

    name: ClassVar[str] = "cms"
    joint_member: ClassVar[bool] = False
    discovery_carrier: ClassVar[bool] = False
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ("k", "cohorts")
    fixed_parameters: ClassVar[tuple[tuple[str, int], ...]] = (("hashes", 1),)

    @classmethod
    def examples(cls) -> tuple[CountMeanSketch, ...]:
        return (cls(k=4, epsilon=1.5, cohorts=2), cls(k=4, epsilon=1.5, cohorts=3, support=6))

    def hashing_twin(self) -> ORappor:
        """The one-hash O-RAPPOR of the same (k, C, support): CMS hashes as it does."""
        return ORappor(k=self.k, epsilon=self.epsilon, cohorts=self.cohorts, hashes=1, support=self.support)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hashes != 1:
            raise ParameterError("cms: a count-mean sketch hashes each value once (hashes = 1)")

    def parameters(self) -> dict[str, int | float | str | bool]:
        out = super().parameters()
        del out["hashes"]
        return out
