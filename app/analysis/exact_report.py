"""check-exact's report: the greedy suites (in the user's mode and in the exact mode), the
sampled test's figures, and what they add up to: the verdict, the reasons it fails, and
whether the user's own settings were checked at all (app.analysis.exactness runs the check).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

YOUR_SETTINGS = "your settings"  # the suite's name for the settings the user gave
P_THRESHOLD = 1e-3  # a correct engine fails this about once in a thousand checks


@dataclass
class GreedySuite:
    """The greedy prompt suite in one kernel mode: identical or where and why it parted."""
    mode: str
    identical: bool
    prompts: int
    divergences: list[dict[str, Any]] = field(default_factory=list)
    # what a verify pass may move a top-two gap by here: on chain rows, and on tree rows
    # (KernelNoise.tree_bound: those the runtime does not mark exact); a tree's divergence
    # is judged by both
    noise_bound: float | None = None
    tree_noise_bound: float | None = None
    drafted: int = 0  # draft tokens the speculative runs judged: identity means nothing at 0
    accepted: int = 0
    # per decode setting the suite ran ("your settings", "tree width 2", "adaptive k"):
    # [draft tokens judged, accepted]
    settings: dict[str, list[int]] = field(default_factory=dict)
    # the most the arithmetic can move a gap (app.analysis.kernel_noise.noise_ceiling)
    noise_ceiling: float | None = None
    # the batched path against single steps where the arithmetic allows no doubt (the exact
    # mode only): what was measured, the largest gap moved and the most allowed, on chain
    # rows and on tree rows (exact_mode.BatchedCheck)
    batched_what: str = ""
    batched_bound: float | None = None
    batched_ceiling: float | None = None
    batched_tree_bound: float | None = None
    batched_tree_ceiling: float | None = None

    @property
    def all_near_ties(self) -> bool:
        """Every difference explained as a near-tie (a run that differs only in length, one
        text a prefix of the other, is not)."""
        if self.identical:
            return True
        return bool(self.divergences) and all(d["near_tie"] for d in self.divergences)

    @property
    def noise_beyond_kernels(self) -> bool:
        return (_beyond(self.noise_bound, self.noise_ceiling)
                or _beyond(self.tree_noise_bound, self.noise_ceiling))

    @property
    def batched_path_wrong(self) -> bool:
        return (_beyond(self.batched_bound, self.batched_ceiling)
                or _beyond(self.batched_tree_bound, self.batched_tree_ceiling))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GreedySuite:
        return cls(mode=str(data["mode"]), identical=bool(data["identical"]),
                   prompts=int(data["prompts"]), divergences=list(data["divergences"]),
                   noise_bound=data.get("noise_bound"), drafted=int(data.get("drafted", 0)),
                   accepted=int(data.get("accepted", 0)),
                   settings={str(k): [int(x) for x in v]
                             for k, v in data.get("settings", {}).items()},
                   noise_ceiling=data.get("noise_ceiling"),
                   tree_noise_bound=data.get("tree_noise_bound"),
                   batched_what=str(data.get("batched_what", "")),
                   batched_bound=data.get("batched_bound"),
                   batched_ceiling=data.get("batched_ceiling"),
                   batched_tree_bound=data.get("batched_tree_bound"),
                   batched_tree_ceiling=data.get("batched_tree_ceiling"))


def _beyond(bound: float | None, ceiling: float | None) -> bool:
    return bound is not None and ceiling is not None and bound > ceiling


@dataclass
class ExactReport:
    greedy: GreedySuite  # the user's mode
    exact: GreedySuite | None  # batch-invariant kernels; None where this backend has none
    p_value: float
    p_first: float
    p_second: float
    samples: int
    temperature: float
    top_k: int
    draft_max: int
    threshold: float = P_THRESHOLD
    notes: list[str] = field(default_factory=list)
    # the exact distributions' largest probabilities, first token and second: near 1, the
    # G-test has nothing to tell apart
    sampled_modes: list[float] = field(default_factory=list)
    sampled_prompt: str = ""
    sampled_drafted: int = 0  # draft tokens the sampled runs judged
    sampled_accepted: int = 0

    @property
    def greedy_identical(self) -> bool:
        return self.greedy.identical

    @property
    def exact_kernels_identical(self) -> bool | None:
        return None if self.exact is None else self.exact.identical

    @property
    def passed(self) -> bool:
        return self.checked and not self.failures()

    @property
    def checked(self) -> bool:
        """The user's own settings drafted in the greedy suite, in the mode they run: without
        that, nothing here is about them."""
        return self.greedy.settings.get(YOUR_SETTINGS, [0])[0] > 0

    def not_checked(self) -> str:
        """Why the user's settings went unchecked ("" where they were checked)."""
        if self.checked:
            return ""
        return (f"your settings drafted no token on the greedy suite's {self.greedy.prompts} "
                f"prompt(s) in the {self.greedy.mode} mode, so nothing here shows they are "
                "exact (the drafter found nothing to draft, or the controller declined every "
                "draft) — give prompts they draft on (-p), or other settings")

    def failures(self) -> list[str]:
        """Why it fails, one reason each (empty when it passes). Where the user's settings
        drafted nothing (not_checked), the parts that drafted nothing for the same reason
        are not listed again."""
        why = []
        exact = self.exact
        if exact is not None and not exact.identical:
            d = exact.divergences[0] if exact.divergences else {}
            why.append(f"with {exact.mode} speculative output differs from plain decoding"
                       f"{_where(d)}: the algorithm is wrong, not the kernels")
        for suite in {id(s): s for s in (exact, self.greedy) if s is not None}.values():
            if _beyond(suite.batched_bound, suite.batched_ceiling):
                why.append(f"with {suite.batched_what} the batched pass differs from single "
                           f"steps by {suite.batched_bound:.3g} logits; kernels do not explain "
                           f"that (at most {suite.batched_ceiling:g} there): the batched path "
                           "(tree mask, positions or kept cache) is wrong")
            if _beyond(suite.batched_tree_bound, suite.batched_tree_ceiling):
                why.append(f"with {suite.batched_what} tree rows differ from single steps "
                           f"by {suite.batched_tree_bound:.3g} logits; "
                           f"kernels do not explain that (at most {suite.batched_tree_ceiling:g}"
                           " there): the tree pass (its mask, positions or rows) is wrong")
        if (exact is not None and exact is not self.greedy and exact.drafted == 0
                and self.greedy.drafted > 0):  # all idle in the user's mode too: not_checked
            why.append(f"the {exact.mode} run (a child process) drafted nothing, so its "
                       "identity shows nothing about speculation")
        first = self.greedy.divergences[0] if self.greedy.divergences else {}
        for rows, bound in (("the batched pass differs", self.greedy.noise_bound),
                            ("tree rows differ", self.greedy.tree_noise_bound)):
            if _beyond(bound, self.greedy.noise_ceiling):
                why.append(f"in the {self.greedy.mode} mode {rows} from single "
                           f"steps by {bound:.3g} logits; kernels do not explain that (at "
                           f"most {self.greedy.noise_ceiling:g} in this arithmetic)")
        if exact is None and not self.greedy.identical:
            why.append(f"greedy output differs from plain decoding{_where(first)} and this "
                       "backend has no batch-invariant mode to show it is only noise")
        elif not self.greedy.all_near_ties:
            d = next((d for d in self.greedy.divergences if not d["near_tie"]), first)
            reason = d.get("reason", "one text ends where the other goes on")
            why.append(f"in the {self.greedy.mode} mode greedy output differs{_where(d)} and it "
                       f"is not a near-tie ({reason})")
        if self.sampled_drafted == 0 and self.checked:  # the same settings drafted nothing
            why.append("the sampled runs drafted nothing, so the sampled test shows nothing "
                       "about the accept/reject rule")
        if self.p_value < self.threshold:
            why.append(f"the sampled test failed: p = {self.p_value:.3g} < {self.threshold:g} "
                       "(the emitted tokens do not follow the target's distribution)")
        return why

    def counts(self) -> str:
        """Draft tokens judged and accepted by each part of the check."""
        parts = [f"{self.greedy.mode} greedy {self.greedy.drafted} drafted / "
                 f"{self.greedy.accepted} accepted"]
        if self.exact is not None and self.exact is not self.greedy:
            parts.append(f"{self.exact.mode} greedy {self.exact.drafted} / "
                         f"{self.exact.accepted}")
        parts.append(f"sampled {self.sampled_drafted} / {self.sampled_accepted}")
        return "; ".join(parts)

    def verdict(self) -> str:
        """One line: what holds on this pair (the user's own settings judged first)."""
        if not self.checked:
            found = self.failures()
            besides = f"; besides, FAIL: {'; '.join(found)}" if found else ""
            return (f"not checked: {self.not_checked()}{besides}; draft tokens judged / "
                    f"accepted: {self.counts()}")
        if not self.passed:
            return "FAIL: " + "; ".join(self.failures())
        exact = ("" if self.exact is None else
                 f"greedy output is bit-identical to plain decoding with {self.exact.mode}; ")
        n = len(self.greedy.divergences)
        default = (f"in the {self.greedy.mode} mode it is identical too; " if n == 0 else
                   f"in the {self.greedy.mode} mode it parts at {n} near-tie(s) within the "
                   f"measured kernel noise ({self.greedy.noise_bound:.3g} logits); ")
        if self.exact is not None and self.exact.mode == self.greedy.mode:
            default = ""
        idle = self.idle_settings()
        untested = (f"; {', '.join(idle)} drafted nothing on these prompts (the drafter or "
                    "controller declined every draft), so this check shows nothing about "
                    f"{'it' if len(idle) == 1 else 'them'}") if idle else ""
        return (f"PASS: {exact}{default}sampled output follows the target's distribution "
                f"(p = {self.p_value:.3g}); draft tokens judged / accepted: {self.counts()}"
                f"{untested}")

    def idle_settings(self) -> list[str]:
        """The suite's settings whose speculative runs judged no draft token, in any mode."""
        suites = [s for s in (self.greedy, self.exact) if s is not None]
        return [name for name in self.greedy.settings
                if any(s.settings.get(name, [0])[0] == 0 for s in suites)]

    def to_dict(self) -> dict[str, Any]:
        exact = self.exact
        return {
            "passed": self.passed, "checked": self.checked, "not_checked": self.not_checked(),
            "verdict": self.verdict(), "failures": self.failures(),
            "greedy_identical": self.greedy_identical,
            "exact_kernels_identical": self.exact_kernels_identical,
            "mode": self.greedy.mode, "exact_mode": exact.mode if exact else None,
            "divergences": self.greedy.divergences,
            "exact_kernels_divergences": exact.divergences if exact else [],
            "noise_bound": self.greedy.noise_bound, "noise_ceiling": self.greedy.noise_ceiling,
            "tree_noise_bound": self.greedy.tree_noise_bound,
            "greedy_prompts": self.greedy.prompts, "settings": self.greedy.settings,
            "drafted": self.greedy.drafted, "accepted": self.greedy.accepted,
            "exact_drafted": exact.drafted if exact else None,
            "exact_accepted": exact.accepted if exact else None,
            "exact_settings": exact.settings if exact else {},
            "settings_that_drafted_nothing": self.idle_settings(),
            "batched_what": exact.batched_what if exact else "",
            "batched_bound": exact.batched_bound if exact else None,
            "batched_ceiling": exact.batched_ceiling if exact else None,
            "batched_tree_bound": exact.batched_tree_bound if exact else None,
            "batched_tree_ceiling": exact.batched_tree_ceiling if exact else None,
            "sampled_drafted": self.sampled_drafted,
            "sampled_accepted": self.sampled_accepted, "sampled_prompt": self.sampled_prompt,
            "p_value": self.p_value, "p_first": self.p_first, "p_second": self.p_second,
            "samples": self.samples, "temperature": self.temperature, "top_k": self.top_k,
            "draft_max": self.draft_max, "threshold": self.threshold, "notes": self.notes,
            "sampled_modes": self.sampled_modes,
        }


def _where(d: dict[str, Any]) -> str:
    if not d:
        return ""
    setting = f" with {d['setting']}" if d.get("setting") else ""
    return (f" at generated token {d['position']} of {d['prompt']!r}{setting} "
            f"({d['plain_text']!r} plain, {d['other_text']!r} speculative)")
