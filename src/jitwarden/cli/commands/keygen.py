"""``jitwarden keygen``: make an Ed25519 key pair for signing bundles and remote-cache values."""

from __future__ import annotations

import os
import sys

from jitwarden.model.errors import EXIT_OK, UsageError


def register(sub) -> None:
    p = sub.add_parser("keygen", help="make a key pair for signed bundles and the remote cache",
                       description="Write a secret signing key (mode 0600, for builders) and its public key "
                                   "(PATH.pub, for every node's trusted keys).")
    p.add_argument("-o", "--output", metavar="PATH", default=None,
                   help="secret key file (default: JITWARDEN_SIGNING_KEY, else <config>/signing-key)")
    p.add_argument("--force", action="store_true", help="overwrite an existing key")
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.ops import keys

    path = keys.signing_key_path(args.output)
    pub = path + ".pub"
    for p in (path, pub):
        if os.path.lexists(p) and not args.force:
            raise UsageError(f"{p} already exists (pass --force to replace it)")
    try:
        secret, public, kid = keys.generate()
    except keys.KeyError_ as exc:
        raise UsageError(str(exc)) from None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    for p, text, mode in ((path, secret, 0o600), (pub, public, 0o644)):
        tmp = f"{p}.tmp.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    print(pub)
    print(f"jitwarden: key {kid}: secret key {path} (keep it on builders only), public key {pub} "
          "(put it in every node's JITWARDEN_TRUSTED_KEYS)", file=sys.stderr)
    return EXIT_OK
