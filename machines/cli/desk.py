"""``machines desk``: the desk, a web application where people act on what waits on them
(``machines.desk``); and ``machines desk add-account``, which adds a person to its accounts."""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
from pathlib import Path

from machines.cli.command import Command, Parsers, problem, whole
from machines.desk.serving import host_name
from machines.errors import MachinesError, install_command, printable

ADD = "add-account"


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "target",
        metavar="URL|add-account",
        help="the store to serve (sqlite:///path or postgresql://...), or add-account",
    )
    command.add_argument("name", nargs="?", help="with add-account: the person's name")
    command.add_argument(
        "--accounts", type=Path, required=True, help="the accounts file (JSON; made by add-account)"
    )
    command.add_argument(
        "--roles",
        help="with add-account: the actors the person may act as, comma-separated "
        "(operator,human): actors the definitions say are not automatic",
    )
    command.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    command.add_argument(
        "--port", type=whole(1, 65535), default=8750, help="the port (default: 8750)"
    )
    command.add_argument(
        "--proxy",
        metavar="ADDRESS",
        help="the address of your TLS proxy: its X-Forwarded-Proto and X-Forwarded-For are "
        "trusted (the page's https origin, the person's address); no one else's are",
    )
    command.add_argument(
        "--hostname",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name people reach the desk by (repeatable; the one your TLS proxy "
        "forwards): a request naming any other host than these, localhost and the --host "
        "address is refused",
    )
    command.add_argument(
        "--session-minutes",
        type=whole(1, 24 * 60),
        default=30,
        help="a session ends after this many minutes unused (default: 30)",
    )
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="the definitions the store was made for (default: $MACHINES_SPEC_DIR, else "
        "[tool.machines] spec_dir in pyproject.toml, else the bundled ones)",
    )


WIDEST = {4: 2**24, 6: 2**96}
"""The most addresses ``--proxy`` may name, all its networks together: a /8 of IPv4, a
/32 of IPv6 (an IPv4-mapped IPv6 network counts as the IPv4 one)."""


def _addresses(text: str) -> str:
    """``text``'s IP addresses and networks, comma-separated, as uvicorn is given them; a
    ``ValueError`` saying why not. Each is an address or a network written as one (no host
    bits set: uvicorn would match nothing, batch 26), and together they name no wide range
    (``WIDEST``, counted over the merged networks: 128 odd /8s are half of IPv4, batch
    26). A range that wide is not a proxy, and every address trusts anyone's headers, as
    ``*`` would."""
    parts = [part.strip() for part in text.split(",")]
    try:
        networks = [ipaddress.ip_network(part) for part in parts]
    except ValueError as error:
        raise ValueError(f"{error} (write a network's own address, 10.0.0.0/8)") from None
    mapped = ipaddress.IPv6Network("::ffff:0:0/96")
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for network in networks:
        if isinstance(network, ipaddress.IPv4Network):
            v4.append(network)
        elif network.subnet_of(mapped):
            v4.append(
                ipaddress.IPv4Network(
                    f"{network.network_address.ipv4_mapped}/{network.prefixlen - 96}"
                )
            )
        elif network.overlaps(mapped):  # wider than the mapped range itself
            raise ValueError("it holds every IPv4 address")
        else:
            v6.append(network)
    counts = {
        4: sum(n.num_addresses for n in ipaddress.collapse_addresses(v4)),
        6: sum(n.num_addresses for n in ipaddress.collapse_addresses(v6)),
    }
    for version, count in counts.items():
        if count > WIDEST[version]:
            raise ValueError(f"{count:,} IPv{version} addresses together; a proxy is fewer")
    return ",".join(parts)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    try:
        if args.target == ADD:
            return _add(args, parsers)
        if args.name is not None or args.roles is not None:
            parsers[1]["desk"].error("a name and --roles go with add-account only")
        names = []
        for given in args.hostname:
            try:
                names.append(host_name(given))
            except ValueError as why:
                parsers[1]["desk"].error(
                    f"--hostname takes a host name as browsers send it (desk.example.com, "
                    f"192.0.2.7, [2001:db8::1]), not {printable(repr(given))} "
                    f"({printable(str(why))})"
                )
        args.hostname = names
        if args.proxy is not None:
            try:
                args.proxy = _addresses(args.proxy)
            except ValueError as why:
                parsers[1]["desk"].error(
                    f"--proxy takes the proxy's IP address or network (192.0.2.7, 10.0.0.0/8; "
                    f"several with commas, a /8 of IPv4 at most in all), not "
                    f"{printable(repr(args.proxy))} ({printable(str(why))}): a name, * or a "
                    "wide range would trust the forwarded headers of anyone who reaches the desk"
                )
        return _serve(args)
    except (MachinesError, OSError) as exc:
        print(f"machines desk: {problem(exc)}", file=sys.stderr)
        return 2


def _add(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.desk.accounts import add_account, people, require_people
    from machines.spec.loader import definition_paths, read_definition
    from machines.spec.project import definitions_dir

    if args.name is None or not args.roles:
        parsers[1]["desk"].error("add-account needs a NAME and --roles ROLE[,ROLE]")
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    if not roles:  # "--roles ," names none (outsider batch 39, c B3)
        parsers[1]["desk"].error("add-account needs a NAME and --roles ROLE[,ROLE]")
    specs = map(read_definition, definition_paths(definitions_dir(args.spec_dir).spec_dir))
    require_people(roles, people(specs), f"account {args.name!r}")  # before the password
    password = _password()
    account = add_account(args.accounts, args.name, roles, password)
    print(f"machines desk: {account.name} may act as {', '.join(account.roles)} ({args.accounts})")
    return 0


def _password() -> str:
    """The new password: asked twice on a terminal, else one line of standard input."""
    if sys.stdin is not None and sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise MachinesError("the two passwords differ; nothing was written")
        return first
    line = sys.stdin.readline() if sys.stdin is not None else ""
    return line.removesuffix("\n").removesuffix("\r")


def _serve(args: argparse.Namespace) -> int:
    from machines.desk.serving import desk_for, serve, url_host
    from machines.store.records import shown_url

    app, store = desk_for(args.target, args.accounts, args.spec_dir, args.session_minutes)
    try:
        print(
            f"machines desk: serving {shown_url(store.url)} on "
            f"http://{url_host(args.host)}:{args.port}/ "
            "(Ctrl-C to stop)",
            file=sys.stderr,
        )
        serve(app, args.host, args.port, proxy=args.proxy, names=args.hostname)
    finally:
        store.close()
    return 0


COMMAND = Command(
    "desk",
    help="serve the desk: what waits on a person, and the moves the definitions let them "
    f"make, signed in ({install_command('desk')}); add-account adds a person",
    description="Exit 0 when stopped, 2 when it cannot start (no accounts, no store at the "
    "URL or one that cannot be opened: the desk makes none, a role no definition has).",
    arguments=_arguments,
    run=_run,
)
