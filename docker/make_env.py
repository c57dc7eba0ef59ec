"""Write ``.env`` for docker-compose from ``docker/.env.example`` with fresh random secrets.

``make up`` runs it when there is no ``.env``: the compose file gives the secrets no
defaults, so a stack never starts with the values published in the example. Settings
that are not secrets (ports, image, worker sizes) are copied as they are.
"""

from __future__ import annotations

import base64
import secrets
import sys
from pathlib import Path

#: Each secret and how to make a fresh one (all URL- and JSON-safe: the API token sits
#: inside a JSON connection, the Postgres password inside a URL).
SECRETS = {
    "AIRFLOW_ADMIN_PASSWORD": lambda: secrets.token_urlsafe(18),
    "AIRFLOW_FERNET_KEY": lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    "AIRFLOW_JWT_SECRET": lambda: secrets.token_urlsafe(64),
    "ENRICHMENT_API_TOKEN": lambda: secrets.token_urlsafe(32),
    "MINIO_ROOT_PASSWORD": lambda: secrets.token_urlsafe(24),
    "MINIO_ENRICHMENT_PASSWORD": lambda: secrets.token_urlsafe(24),
    "SPARK_AUTH_SECRET": lambda: secrets.token_urlsafe(32),
    "POSTGRES_PASSWORD": lambda: secrets.token_hex(24),
}


def render(example: str) -> str:
    """The example's text with every secret's value replaced by a new random one."""
    lines = []
    for line in example.splitlines():
        name, sep, _ = line.partition("=")
        if sep and not line.lstrip().startswith("#") and name.strip() in SECRETS:
            line = f"{name}={SECRETS[name.strip()]()}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    example, target = Path(argv[0]), Path(argv[1])
    if target.exists():
        print(f"{target} exists: keeping it")
        return 0
    target.write_text(render(example.read_text()))
    target.chmod(0o600)
    print(f"wrote {target} with random secrets (the admin password is in it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
