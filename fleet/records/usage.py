"""Usage's record: the figures fleet status shows of a participant's spend (counted by :mod:`fleet.usage`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, computed_field


class Figures(BaseModel):
    """Tokens, responses, turns and the estimated cost of a participant, a wavelet or a wave."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    turns: int = 0
    requests: int = 0
    cost_usd: float | None = 0.0
    """None when a model counted here has no price (named in :attr:`unpriced`): never a partial sum."""
    unpriced: list[str] = Field(default_factory=list)
    """The models counted here that have no price: why :attr:`cost_usd` is None."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens(self) -> int:
        """Every token the model processed or wrote (what a ``tokens`` budget counts)."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_creation_tokens

    def add(self, other: Figures) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_creation_tokens += other.cache_creation_tokens
        self.turns += other.turns
        self.requests += other.requests
        self.cost_usd = (
            None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        )
        if other.unpriced:
            self.unpriced = sorted({*self.unpriced, *other.unpriced})
