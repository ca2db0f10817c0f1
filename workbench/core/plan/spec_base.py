"""The base of the typed specs that extension keys (``reparam``, ``partial``) hold on a rule.

A spec is a frozen dataclass: parsed and checked once, immutable afterwards. It serializes to
exactly the JSON a plan file holds (:meth:`ExtensionSpec.to_json`) and reads like that JSON
too (``spec["mode"]``, ``spec == {...}``), so code and files written against the plain-dict
form keep working.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from workbench.core.plan.tree import ModuleNode

__all__ = ["ExtensionSpec"]


class ExtensionSpec(Mapping[str, Any]):
    """A parsed extension value; subclasses are frozen dataclasses.

    Attributes:
        key: the plan key the spec is the value of (``"reparam"``, ``"partial"``).
        conflicts_with: plan keys that cannot be in force on the same module.
    """

    key: ClassVar[str]
    conflicts_with: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(cls, raw: Any) -> ExtensionSpec:  # pragma: no cover - every subclass overrides
        """Validate and normalize the JSON value of the key.

        Raises:
            ValueError: the value is invalid (the message names the sub-field and the fix).
        """
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass overrides
        """The JSON value of the key, as a plan file holds it."""
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - every subclass overrides
        """One line for the GUI, the CLI and plan summaries."""
        raise NotImplementedError

    def check(self, node: ModuleNode) -> str | None:
        """What is wrong with this spec on a module, as far as its tree node tells.

        Args:
            node: the module's tree node.

        Returns:
            A message saying what is wrong and what to do, or None.
        """
        return None

    def changes_function(self) -> bool | None:
        """Whether installing the spec changes the model's function (None: depends on files)."""
        return False

    def conflict_message(self, path: str, other: str) -> str:
        """The message for a module where this spec and the key ``other`` are both in force.

        Args:
            path: the module's dotted path.
            other: the conflicting key.

        Returns:
            What is wrong and what to do.
        """
        return f"'{self.key}' and '{other}' cannot be combined on one module; remove one of them"

    # ---------------------------------------------------------- read-only JSON view
    def __getitem__(self, name: str) -> Any:
        return self.to_json()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExtensionSpec):
            return type(self) is type(other) and self.to_json() == other.to_json()
        if isinstance(other, Mapping):
            return self.to_json() == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.key, json.dumps(self.to_json(), sort_keys=True)))

    def __str__(self) -> str:
        return str(self.to_json())
