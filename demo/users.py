"""Signed-in Airflow users for the services of :mod:`demo.stack` (tests that check who
may see what); ``make demo`` runs with every user an admin instead."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Users:
    """Signed-in users instead of "everyone is admin": SimpleAuthManager accounts, each
    ``name -> (role, password)``, and the one the helpers' REST calls act as."""

    accounts: dict[str, tuple[str, str]]
    teams: dict[str, str] = field(default_factory=dict)
    """``name -> team`` for multi-team deployments."""

    def env(self, home: Path) -> dict[str, str]:
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({name: pw for name, (_, pw) in self.accounts.items()}))
        spec = ",".join(
            ":".join([name, role, *([self.teams[name]] if name in self.teams else [])])
            for name, (role, _) in self.accounts.items()
        )
        return {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": spec,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        }

    @property
    def admin(self) -> str:
        return next(name for name, (role, _) in self.accounts.items() if role == "admin")
