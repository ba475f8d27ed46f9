"""``pilothouse keys``: make this machine's CurveZMQ keys, admit clients, trust agents."""

from __future__ import annotations

import argparse
import json
import re

from pilothouse.security import Keyring
from pilothouse.text import url_arg


def add_parser(sub: argparse._SubParsersAction, keys_arg: argparse.ArgumentParser) -> None:
    k = sub.add_parser("keys", help="CurveZMQ keys for reaching agents across the network")
    ks = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    i = ks.add_parser("init", parents=[keys_arg], help="create this machine's agent and client keypairs")
    i.add_argument("--force", action="store_true", help="replace existing keypairs (clients must be re-allowed)")
    i.set_defaults(func=cmd_init)
    show = ks.add_parser("show", parents=[keys_arg], help="print public keys, allowed clients and trusted agents")
    show.add_argument("--json", action="store_true",
                      help='machine-readable: {"agent": KEY, "client": KEY, "allowed": {KEY: NAME}, "trusted": {URL: KEY}}')
    show.set_defaults(func=cmd_show)
    a = ks.add_parser("allow", parents=[keys_arg], help="let a client's public key connect to this node's agent")
    a.add_argument("key", help="the client's public key (`pilothouse keys show` on the client)")
    a.add_argument("--name", help="who this is, for the audit log (default: from the key)")
    a.set_defaults(func=cmd_allow)
    r = ks.add_parser("revoke", parents=[keys_arg], help="remove an allowed client, by key or name")
    r.add_argument("client", help="public key or name")
    r.set_defaults(func=cmd_revoke)
    t = ks.add_parser("trust", parents=[keys_arg], help="the agent public key to expect at a URL")
    t.add_argument("url", type=url_arg, help="the agent's CurveZMQ listener, like tcp://node7:7767")
    t.add_argument("key", help="the agent's public key (`pilothouse keys show` on the node)")
    t.set_defaults(func=cmd_trust)


def cmd_init(args: argparse.Namespace) -> int:
    ring = Keyring(args.keys)
    made = ring.init(force=args.force)
    print(f"keys in {ring.dir}" + ("" if made else " (kept the existing ones; --force replaces them)"))
    _print_publics(ring)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    ring = Keyring(args.keys)
    if args.json:
        print(json.dumps({**{role: ring.public(role) for role in ("agent", "client")},
                          "allowed": ring.allowed(), "trusted": ring.known_agents()}))
        return 0
    _print_publics(ring)
    for key, name in ring.allowed().items():
        print(f"allowed client  {key}  {name}")
    for url, key in ring.known_agents().items():
        print(f"trusted agent   {key}  {url}")
    return 0


def cmd_allow(args: argparse.Namespace) -> int:
    ring = Keyring(args.keys)
    name = args.name or "client-" + re.sub(r"[^A-Za-z0-9]", "", args.key)[:8]
    ring.allow(args.key, name)
    print(f"allowed {name} ({args.key}); a running agent picks this up at the client's next connection")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    names = Keyring(args.keys).revoke(args.client)
    print(f"revoked {', '.join(names)}; a running agent refuses their next message")
    return 0


def cmd_trust(args: argparse.Namespace) -> int:
    Keyring(args.keys).trust(args.url, args.key)
    print(f"trusting agent key {args.key} at {args.url}")
    return 0


def _print_publics(ring: Keyring) -> None:
    for role in ("agent", "client"):
        print(f"{role:<6} public key  {ring.public(role)}")
