"""CurveZMQ keys: only the owner gets in on the node, only listed keys from the network.

Loopback is not a trust boundary on a shared GPU node (every user reaches 127.0.0.1), so the
agent's loopback port is CURVE too, with the owner's local keys: a keyring in the user config
dir that the first process needing it creates (secrets 0600, the folder 0700).  Every process of
the owner (trainers, CLI, app) reads it and gets in with no step to do; another user cannot read
it, so their connections fail the handshake, and a process squatting on the port cannot finish
one either (the client checks the agent's key).  Anything reachable from the network is a
second, CURVE-only listener whose clients are listed by key.  A keyring is one directory, like
``~/.ssh``:

* ``agent.key`` / ``agent.key_secret`` and ``client.key`` / ``client.key_secret``, ZeroMQ
  certificates (the secret files are 0600 and refused when others can read them);
* ``allowed_clients``: the client public keys this node's agent admits, one ``KEY NAME`` a line;
* ``known_agents``: the agent public key a client expects at each URL, one ``URL KEY`` a line.

Keys are shown and stored as hex: z85 uses ``$ & ! # -`` and breaks in a shell or argument list.

Both sides authenticate: the agent admits only listed client keys (ZAP on the agent's own
context, with ``ZAP_ENFORCE_DOMAIN`` so a missing handler refuses instead of admitting), and a
client talks CURVE only to the key it was told, so a wrong server cannot finish the handshake.

The same one rule keeps the owner's other files the owner's (``check_owned``, ``check_folders``):
the alert rules file, whose programs run as the owner, the data folders and the files in them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from pilothouse.wire.urls import check_url, is_loopback

log = logging.getLogger("pilothouse.security")

ENV_KEYS = "PILOTHOUSE_KEYS"
ENV_LOCAL_KEYS = "PILOTHOUSE_LOCAL_KEYS"  # the owner's local keyring, if not the user config dir's
ZAP_DOMAIN = "pilothouse"
LOCAL_DOMAIN = "pilothouse-local"
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)  # socket monitor events: why no connection
ROLES = ("agent", "client")
ALLOWED_FILE = "allowed_clients"
KNOWN_FILE = "known_agents"
_NAME = re.compile(r"[A-Za-z0-9@._+-]{1,64}")


class SecurityError(ValueError):
    """Keys are missing, malformed or exposed; the message says what to run."""


@dataclass(frozen=True)
class Keypair:
    public: bytes  # z85, as zmq.auth loads it and the curve_* socket options take it
    secret: bytes


@dataclass(frozen=True)
class Credentials:
    """How a client reaches one URL: its keypair, the agent key it expects, whose keys they are."""

    keys: Keypair
    server: str  # hex
    local: bool  # the owner's local keys (loopback), not a key pinned with `keys trust`

    def secure(self, sock: zmq.Socket) -> None:
        secure_client(sock, self.keys, self.server)

    def refused(self, url: str) -> str:
        if self.local:
            return (f"the agent at {url} refused this process: it belongs to another user (only its owner's "
                    "processes get in on this node), or its owner's local keys are not these")
        public = key_hex(self.keys.public)
        return f"the agent at {url} refused this client's key {public}: on the agent's node run " \
               f"`pilothouse keys allow {public} --name NAME`"

    def failed(self, url: str) -> str:
        if self.local:
            return (f"the process listening at {url} is not your agent (its key is not your local agent key): "
                    "another user's agent or a squatter on the port; nothing was sent to it")
        return (f"CurveZMQ handshake with {url} failed: the agent key trusted for this URL does not match the "
                "agent's (`pilothouse keys show` on its node), or nothing there speaks CURVE")


def default_keys_dir() -> Path:
    return Path(os.environ.get(ENV_KEYS) or Path(platformdirs.user_config_dir("pilothouse")) / "keys")


def local_keyring() -> Keyring:
    """The owner's keys for the loopback port, made on first use: the same for every process of this
    user (unlike ``--keys``, which is about the network), so a trainer and its agent always agree."""
    ring = Keyring(os.environ.get(ENV_LOCAL_KEYS) or Path(platformdirs.user_config_dir("pilothouse")) / "local")
    ring.ensure()
    return ring


def check_key(text: object) -> str:
    """A CURVE public key as 64 hex digits (safe to paste into a shell); ZeroMQ's z85 form is accepted too."""
    if isinstance(text, str) and len(text) == 64:
        try:
            return bytes.fromhex(text).hex()
        except ValueError:
            pass
    elif isinstance(text, str) and len(text) == 40:
        try:
            return key_hex(text)
        except (ValueError, UnicodeEncodeError, KeyError):
            pass
    raise SecurityError(f"a public key is 64 hex digits (`pilothouse keys show` prints it), got {text!r:.80}")


def key_hex(z85_key: str | bytes) -> str:
    raw = z85_key.encode("ascii") if isinstance(z85_key, str) else z85_key
    decoded = z85.decode(raw)
    if len(decoded) != 32:
        raise ValueError("not a 32-byte key")
    return decoded.hex()


def check_key_name(text: object) -> str:
    if not isinstance(text, str) or not _NAME.fullmatch(text):
        raise SecurityError(f"a key name is 1-64 letters, digits or @._+- (like alice@laptop), got {text!r:.80}")
    return text


class Keyring:
    def __init__(self, directory: str | Path | None = None):
        self.dir = Path(directory) if directory is not None else default_keys_dir()

    # --- keypairs ------------------------------------------------------------------------

    def ensure(self) -> None:
        """Both keypairs exist, made now if not; two processes racing here make them once."""
        if all(self._paths(role)[1].exists() for role in ROLES):
            return
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.dir / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.init()
        finally:
            os.close(fd)

    def init(self, force: bool = False) -> list[Path]:
        """Create this machine's agent and client keypairs; existing ones are kept unless forced."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        made = []
        for role in ROLES:
            public, secret = self._paths(role)
            if secret.exists() and not force:
                continue
            for path in (public, secret):
                path.unlink(missing_ok=True)
            old = os.umask(0o077)  # the secret file never exists with wider permissions
            try:
                zmq.auth.create_certificates(str(self.dir), role)
            finally:
                os.umask(old)
            os.chmod(public, 0o644)
            made += [public, secret]
        return made

    def keypair(self, role: str) -> Keypair:
        _, secret = self._paths(role)
        if not secret.exists():
            raise SecurityError(f"no {role} key in {self.dir}: run `pilothouse keys init`")
        check_owned(secret, secret.stat(), private=True)  # a secret others can read is no secret
        pub, sec = zmq.auth.load_certificate(str(secret))
        if sec is None:
            raise SecurityError(f"{secret} holds no secret key")
        return Keypair(pub, sec)

    def public(self, role: str) -> str:
        public, _ = self._paths(role)
        if not public.exists():
            raise SecurityError(f"no {role} key in {self.dir}: run `pilothouse keys init`")
        return key_hex(zmq.auth.load_certificate(str(public))[0])

    def _paths(self, role: str) -> tuple[Path, Path]:
        if role not in ROLES:
            raise ValueError(f"key role is agent or client, got {role!r}")
        return self.dir / f"{role}.key", self.dir / f"{role}.key_secret"

    # --- the agent's allow-list ------------------------------------------------------------

    def allowed(self) -> dict[str, str]:
        """Client public key -> name."""
        return dict(self._read(ALLOWED_FILE))

    def allow(self, key: str, name: str) -> None:
        key, name = check_key(key), check_key_name(name)
        entries = [(k, n) for k, n in self._read(ALLOWED_FILE) if k != key]
        self._write(ALLOWED_FILE, entries + [(key, name)])

    def revoke(self, key_or_name: str) -> list[str]:
        """Remove a client by key or name; returns the names removed."""
        entries = self._read(ALLOWED_FILE)
        gone = [n for k, n in entries if key_or_name in (k, n)]
        if not gone:
            raise SecurityError(f"no allowed client {key_or_name!r} in {self.dir / ALLOWED_FILE}")
        self._write(ALLOWED_FILE, [(k, n) for k, n in entries if key_or_name not in (k, n)])
        return gone

    # --- the client's known agents ---------------------------------------------------------

    def trust(self, url: str, key: str) -> None:
        url, key = check_url(url), check_key(key)
        self._write(KNOWN_FILE, [(u, k) for u, k in self._read(KNOWN_FILE) if u != url] + [(url, key)])

    def agent_key(self, url: str) -> str | None:
        return dict(self._read(KNOWN_FILE)).get(url)

    def known_agents(self) -> dict[str, str]:
        return dict(self._read(KNOWN_FILE))

    # --- files -----------------------------------------------------------------------------

    def _read(self, name: str) -> list[tuple[str, str]]:
        path = self.dir / name
        if not path.exists():
            return []
        check_owned(path, path.stat())  # a list others may edit admits whom they like
        pairs = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            fields = line.split()  # no comments: '#' is a z85 character
            if not fields:
                continue
            if len(fields) != 2:
                raise SecurityError(f"{path}:{number}: expected two fields, got {line!r:.120}")
            pairs.append((fields[0], fields[1]))
        return pairs

    def _write(self, name: str, pairs: list[tuple[str, str]]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path, tmp = self.dir / name, self.dir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(f"{a} {b}\n" for a, b in pairs)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


# --- files and folders only the owner controls -----------------------------------------------
#
# One rule for all that holds the owner's secrets or decides what runs as them: the key files, the
# alert rules file (its programs run as the owner), the data folders and the journal, the app's
# store and an agent's log in them.  A shared node's other users can make files and folders first
# wherever a name is guessable (/tmp/pilothouse-$USER), or plant a link there; what they made is
# refused, never used nor taken over (chown, chmod): it would stay theirs to read or to change.

def check_owned(path: Path, st: os.stat_result, *, private: bool = False) -> None:
    """``path`` (``st`` is its stat, lstat or fstat) is the user's and no one else may change it,
    nor read it if ``private``; the error says which command fixes it."""
    _refuse_others(path, st)
    mask = stat.S_IRWXG | stat.S_IRWXO if private else stat.S_IWGRP | stat.S_IWOTH
    if st.st_mode & mask:
        what, fix = ("readable", "600") if private else ("writable", "go-w")
        raise SecurityError(f"refusing {path}: it is {what} by other users (mode {stat.S_IMODE(st.st_mode):o}), "
                            f"who may have changed it: check what it holds, then run `chmod {fix} {path}`")


def _refuse_others(path: Path, st: os.stat_result) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise SecurityError(f"refusing {path}: it belongs to {_user(st.st_uid)}, not to you ({_user(me)}); "
                            f"another user may have made it first for you to use. Use a path of your own, "
                            f"or if it is yours, `sudo chown {_user(me)} {path}`")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_folders(folder: Path, what: Path) -> None:
    """OpenSSH's StrictModes rule (``safe_path`` in its misc.c) for the folders above ``what``:
    ``folder`` and each one above it up to / (links resolved) belongs to root or the user, and no
    one else may write to it, or another user could put a file of theirs in ``what``'s place.  A
    folder others may write is accepted where OpenSSH's is not when it is sticky (``/tmp``, mode
    1777) and root's or the user's: there no one but an entry's owner (and root) can remove or
    rename it, so what the user made in it stays theirs; what is below it is checked in turn."""
    me = os.geteuid()
    real = Path(os.path.realpath(folder))
    for above in (real, *real.parents):
        st = os.stat(above)
        if st.st_uid not in (0, me):
            raise SecurityError(f"refusing {what}: the folder {above} belongs to {_user(st.st_uid)}, who could put "
                                f"a file of theirs in its place; keep it in a folder of yours")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise SecurityError(f"refusing {what}: the folder {above} is writable by other users (mode "
                                f"{stat.S_IMODE(st.st_mode):o}), who could put a file of theirs in its place; "
                                f"run `chmod go-w {above}` or keep it in a folder only you can write to")


def read_owned(path: Path) -> bytes:
    """The bytes of a file that decides what runs as the user (the alert rules), refused unless the
    user owns it and no one else may write it or any folder above it (``check_folders``).  The file
    checked is the file read: opened without following a link, checked through its descriptor."""
    real = Path(os.path.realpath(path))
    check_folders(real.parent, path)
    fd = _open_nofollow(real, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecurityError(f"refusing {path}: not a regular file")
        check_owned(path, st)
        with open(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def private_dir(path: Path) -> None:
    """A folder only its owner can enter (runs, configs and prompts are nobody else's business on a
    shared node): made 0700, or one of the user's narrowed to it.  One another user made first, or
    a link (lstat, never followed), is refused and left as it is; so is a folder above it that
    others could swap (``check_folders``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_folders(path.parent, path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise SecurityError(f"refusing {path}: it is a symbolic link (to {os.readlink(path)}), which another user "
                            f"may have made; pass the folder itself (`realpath {path}`) or a new one")
    if not stat.S_ISDIR(st.st_mode):
        raise SecurityError(f"refusing {path}: it is not a folder")
    _refuse_others(path, st)
    os.chmod(path, 0o700)  # the user's own folder; in a sticky parent no one else can swap it


def owned_file(path: Path, flags: int) -> int:
    """A descriptor on the user's own data file ``path`` (made 0600 if ``flags`` has O_CREAT), narrowed
    to 0600.  A link is refused, not followed: another user's link would make the user write to, or
    chmod, the file it points at; another user's file is refused, never taken over."""
    fd = _open_nofollow(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecurityError(f"refusing {path}: not a regular file; remove it (`rm {path}`)")
        _refuse_others(path, st)
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)  # a file from before this rule, or made under a loose umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a link by name, and that a FIFO planted in its place cannot hang
    (regular files ignore O_NONBLOCK)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP or not os.path.islink(path):
            raise
        raise SecurityError(f"refusing {path}: it is a symbolic link (to {os.readlink(path)}), which pilothouse "
                            f"never follows there: another user may have made it to have you write to the "
                            f"file it points at. Remove it (`rm {path}`)") from None


# --- sockets ---------------------------------------------------------------------------------

class AllowList:
    """The ZAP callback: re-reads ``allowed_clients`` when it changes, so `keys allow` needs no restart."""

    def __init__(self, ring: Keyring):
        self.ring = ring
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._names: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        path = self.ring.dir / ALLOWED_FILE
        try:
            st = path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp or stamp is None:
            self._stamp = stamp
            return self.ring.allowed()
        return self._names

    def name(self, key: str) -> str | None:
        with self._lock:
            try:
                self._names = self._load()
            except (OSError, SecurityError):
                self._names = {}  # unreadable or exposed: admit no one rather than stale entries
            return self._names.get(key)

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's authenticator hands over the client key z85-encoded."""
        return domain == ZAP_DOMAIN and self.name(key_hex(key)) is not None


class Owner:
    """The ZAP callback of the loopback port: only the owner's own local client key gets in."""

    def __init__(self, ring: Keyring):
        self.key = ring.keypair("client").public

    def callback(self, domain: str, key: bytes) -> bool:
        return domain == LOCAL_DOMAIN and key == self.key


class Gate:
    """The agent's ZAP handler, on the agent's own context: the owner on loopback, listed keys from
    the network; with ``ZAP_ENFORCE_DOMAIN`` a dead handler refuses everyone instead of admitting."""

    def __init__(self, ctx: zmq.Context):
        self.auth = ThreadAuthenticator(ctx)
        self.auth.start()

    def local(self, sock: zmq.Socket, ring: Keyring) -> None:
        self.auth.configure_curve_callback(LOCAL_DOMAIN, credentials_provider=Owner(ring))
        secure_server(sock, ring.keypair("agent"), LOCAL_DOMAIN)

    def stop(self) -> None:
        self.auth.stop()


class CurveListener:
    """The agent's network-facing ROUTER: CURVE server, clients from the allow-list."""

    def __init__(self, ctx: zmq.Context, gate: Gate, url: str, ring: Keyring):
        self.url = check_url(url, bind=True)
        keys = ring.keypair("agent")
        if not ring.allowed():
            raise SecurityError(f"no client may connect to {url}: allow one with "
                                f"`pilothouse keys allow CLIENT_PUBLIC_KEY --name NAME` (keys in {ring.dir})")
        self.allow = AllowList(ring)
        gate.auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self.allow)
        self.sock = ctx.socket(zmq.ROUTER)
        secure_server(self.sock, keys)
        self.public = key_hex(keys.public)

    def close(self) -> None:
        self.sock.close(linger=0)


def secure_server(sock: zmq.Socket, keys: Keypair, domain: str = ZAP_DOMAIN) -> None:
    sock.curve_server = True
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.zap_domain = domain.encode()
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler answering means refused, not admitted


def client_keys(url: str, ring: Keyring | None = None) -> Credentials:
    """This client's keypair and the agent key to expect at ``url``: a key pinned for the URL with
    ``keys trust`` (a tunnel or a listener), else, on loopback, the owner's local keys."""
    ring = ring if ring is not None else Keyring()
    try:
        server = ring.agent_key(url) if ring.dir.exists() else None
    except SecurityError as exc:
        if not is_loopback(url):
            raise
        # a keyring we must not trust cannot pin a key; the owner's local keys still reach the
        # owner's own agent, so a trainer or a local tool keeps working
        log.warning("ignoring the keyring for %s: %s", url, exc)
        server = None
    if server is None:
        if is_loopback(url):
            local = local_keyring()
            return Credentials(local.keypair("client"), local.public("agent"), local=True)
        raise SecurityError(f"no agent key known for {url}: on the agent's node run `pilothouse keys show`, "
                            f"then here `pilothouse keys trust {url} AGENT_PUBLIC_KEY` (or use an SSH tunnel "
                            f"to the agent's loopback port)")
    return Credentials(ring.keypair("client"), server, local=False)


def secure_client(sock: zmq.Socket, keys: Keypair, server_key: str) -> None:
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret
    sock.curve_serverkey = bytes.fromhex(server_key)
