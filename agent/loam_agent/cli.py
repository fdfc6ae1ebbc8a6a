"""loam-agent: inventory, enrol, run, image.

Exit statuses: 0 done; 1 the portal couldn't be reached or answered something unusable;
2 bad usage or configuration, or no credential; 3 the portal refused the join token or the
credential (systemd: RestartPreventExitStatus=3, since restarting won't fix it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from loam_agent import __version__
from loam_agent.client import PortalClient, PortalError, Rejected
from loam_agent.config import AgentConfig, ConfigError, load_config, parse_portal_url
from loam_agent.credential import CredentialError, load_credential, save_credential
from loam_agent.facts import server_facts
from loam_agent.hosts.image import (
    ImageError,
    build_image,
    images_dir,
    known_recipes,
    list_images,
    load_recipe,
)
from loam_agent.hosts.image_copies import ImageCopier
from loam_agent.hosts.model import HostError
from loam_agent.hosts.network import ServerNetwork, discover
from loam_agent.hosts.poller import HostsPoller
from loam_agent.hosts.runtime import HostRuntime
from loam_agent.hosts.saved_images import keep_only, list_saved, saved_images_dir
from loam_agent.hosts.sequence import REPORT_SEQUENCE_FILE, ReportSequence
from loam_agent.readers import all_readers
from loam_agent.readers.base import AcceleratorReader, CardSample
from loam_agent.reading import Reading, take_reading

logger = logging.getLogger("loam_agent")

EXIT_OK, EXIT_PORTAL, EXIT_USAGE, EXIT_REJECTED = 0, 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(verbose=args.verbose)
    try:
        config = load_config(args.config)
        return args.command(args, config)
    except (ConfigError, CredentialError) as error:
        logger.error("%s", error)
        return EXIT_USAGE
    except Rejected as error:
        logger.error("%s", error)
        return EXIT_REJECTED
    except PortalError as error:
        logger.error("%s", error)
        return EXIT_PORTAL
    except ImageError as error:
        logger.error("%s", error)
        return EXIT_PORTAL


def configure_logging(*, verbose: bool) -> None:
    """INFO is for changes (a host created, stopped, removed; a failure, a recovery); routine
    traffic is DEBUG, shown with --verbose."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: the hosts poll each second and every heartbeat.
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose else logging.WARNING)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loam-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"loam-agent {__version__}")
    parser.add_argument(
        "--config", type=Path, help="configuration file (default /etc/loam-agent/agent.toml)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    inventory = commands.add_parser("inventory", help="print the cards, their figures, each reader")
    inventory.add_argument("--json", action="store_true", help="print JSON as the portal gets it")
    inventory.set_defaults(command=inventory_command)

    enrol = commands.add_parser("enrol", help="enrol this server with a join token")
    enrol.add_argument("--portal", help="the portal's URL (default: portal_url in the config)")
    enrol.add_argument("--token", required=True, help="the join token from the operator console")
    enrol.add_argument(
        "--force", action="store_true", help="enrol again even though a credential exists"
    )
    enrol.set_defaults(command=enrol_command)

    run = commands.add_parser("run", help="sample and send heartbeats until SIGTERM")
    run.add_argument("--no-hosts", action="store_true", help="heartbeats only; leave hosts alone")
    run.set_defaults(command=run_command)

    image = commands.add_parser("image", help="build or list the host images")
    image_commands = image.add_subparsers(required=True, metavar="ACTION")
    build = image_commands.add_parser("build", help="build a host image (once; cached)")
    build.add_argument("--name", default="debian-12", help="the image (default debian-12)")
    build.add_argument("--rebuild", action="store_true", help="build again even if it exists")
    build.add_argument(
        "--vendor-file",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a vendor's file the image needs (e.g. the CANN toolkit installer); repeatable",
    )
    build.set_defaults(command=image_build_command)
    image_list = image_commands.add_parser(
        "list", help="list the images: name, digest and size where built, what is in each"
    )
    image_list.set_defaults(command=image_list_command)
    return parser


def _images(config: AgentConfig) -> Path:
    return images_dir(config.state_dir, os.environ.get("LOAM_AGENT_IMAGE_DIR"))


def image_build_command(args: argparse.Namespace, config: AgentConfig) -> int:
    mirror = os.environ.get("MIRROR", config.apt_mirror)
    root = build_image(
        _images(config), args.name, mirror, rebuild=args.rebuild, vendor_files=args.vendor_file
    )
    print(root)
    return EXIT_OK


def image_list_command(args: argparse.Namespace, config: AgentConfig) -> int:
    """Every recipe, built or not: an operator sees what can be built, and what is."""
    built = {image.name: image for image in list_images(_images(config))}
    for name in known_recipes():
        image = built.get(name)
        digest = image.digest if image else "not built"
        size = f"{image.size_bytes / 2**30:.2f} GiB" if image else "-"
        print(f"{name:<16} {digest:<71} {size:>10}  {load_recipe(name).description}")
    return EXIT_OK


def _saved_images(config: AgentConfig) -> Path:
    return saved_images_dir(config.state_dir, os.environ.get("LOAM_AGENT_SAVED_IMAGE_DIR"))


def reported_images(images: Path, saved: Path) -> list[dict]:
    """The heartbeat's `images`: each image built or saved here, by name and digest."""
    held = [*list_images(images), *list_saved(saved)]
    return [{"name": image.name, "digest": image.digest} for image in held]


def inventory_command(args: argparse.Namespace, config: AgentConfig) -> int:
    reading = _read_once(all_readers())
    if args.json:
        print(json.dumps(reading.to_json(), indent=2))
    else:
        print(_describe(reading))
    return EXIT_OK


def enrol_command(args: argparse.Namespace, config: AgentConfig) -> int:
    portal_url = parse_portal_url(args.portal) if args.portal else config.portal_url
    if portal_url is None:
        raise ConfigError("no portal to enrol with: pass --portal or set portal_url in the config")
    if config.credential_path.exists() and not args.force:
        raise ConfigError(
            f"this server is already enrolled (credential at {config.credential_path}); "
            "pass --force to enrol it again as a new server"
        )
    reading = _read_once(all_readers())
    try:
        network = discover(config.uplink, config.public_address, config.dns_servers)
    except HostError as error:  # a server enrolled before its network is set up
        logger.warning("%s; enrolling without a public address", error)
        network = None
    server = {**server_facts(), **_reachable_at(config, network)}
    facts = {
        "server": server,
        **_inventory_only(reading.to_json()),
        "images": reported_images(_images(config), _saved_images(config)),
    }
    with PortalClient(portal_url, ca_bundle=config.ca_bundle) as client:
        credential = client.enrol(join_token=args.token, facts=facts)
    save_credential(config.credential_path, credential)
    logger.info(
        "enrolled with %s as server %s; credential in %s",
        portal_url,
        credential.server_id,
        config.credential_path,
    )
    return EXIT_OK


def run_command(args: argparse.Namespace, config: AgentConfig) -> int:
    credential = load_credential(config.credential_path)
    if config.portal_url is not None and config.portal_url != credential.portal_url:
        raise ConfigError(
            f"the credential was issued by {credential.portal_url}, but the config names "
            f"{config.portal_url}; enrol with {config.portal_url} or fix portal_url"
        )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    readers = all_readers()
    logger.info(
        "reporting to %s as server %s every %g s",
        credential.portal_url,
        credential.server_id,
        config.sample_interval_s,
    )
    client = PortalClient(
        credential.portal_url, credential=credential, ca_bundle=config.ca_bundle, stop=stop
    )
    hosts, network = None, None
    if not args.no_hosts:
        try:
            network = discover(
                config.uplink, config.public_address, config.dns_servers, config.public_ports
            )
            runtime = HostRuntime(
                config.state_dir,
                _images(config),
                lambda: _card_devices(readers),
                network,
                saved_images=_saved_images(config),
            )
            # What an older agent left open, and the rules a reboot or a crash lost (or a
            # release while the agent was down left behind).
            runtime.harden()
            runtime.apply_firewall()
        except HostError as error:
            network = None
            # Heartbeats go on, so the operator sees the server and why it takes no hosts.
            logger.error("%s; running without hosts", error)
    if network is not None:
        hosts = HostsPoller(
            client,
            runtime,
            poll_interval_s=config.hosts_poll_interval_s,
            full_report_s=config.sample_interval_s,
            sequence=ReportSequence(config.state_dir / REPORT_SEQUENCE_FILE),
            stop=stop,
            usage=runtime.usage,
            keep_saved_images=lambda kept: keep_only(runtime.saved_images, kept, runtime.hosts_dir),
            image_copier=ImageCopier(client, runtime.saved_images),
        )
        threading.Thread(target=hosts.run, name="hosts", daemon=True).start()
    try:
        while not stop.is_set():
            if hosts is not None and hosts.rejected is not None:
                raise hosts.rejected
            started = time.monotonic()
            reading = take_reading(readers)
            try:
                client.heartbeat(
                    {
                        "agent_version": __version__,
                        **_reachable_at(config, network),
                        **reading.to_json(),
                        "images": reported_images(_images(config), _saved_images(config)),
                    }
                )
            except Rejected:
                raise  # final: main() exits 3 so the service manager doesn't restart it

            except PortalError as error:
                # The portal marks a silent server unhealthy; the next reading is fresher than
                # this one, so it is not queued.
                logger.warning("heartbeat not delivered: %s", error)
            stop.wait(max(0.0, config.sample_interval_s - (time.monotonic() - started)))
    finally:
        client.close()
        for reader in readers:
            reader.close()
    logger.info("stopped")
    return EXIT_OK


def _reachable_at(config: AgentConfig, network: ServerNetwork | None) -> dict:
    """Where tenants reach this server's hosts: its public address and the ports to hand out."""
    address = network.public_address if network else config.public_address
    return {"public_address": address, "public_ports": list(config.public_ports)}


def _card_devices(readers: list[AcceleratorReader]) -> dict[str, str]:
    """Card uuid -> device file, for binding cards into hosts; LOAM_AGENT_CARD_DEVICES (JSON)
    replaces it where there are no real cards (tests, a demo server)."""
    if override := os.environ.get("LOAM_AGENT_CARD_DEVICES"):
        return json.loads(override)
    reading = take_reading(readers)
    return {card.uuid: card.device_path for card in reading.cards if card.device_path}


def _read_once(readers: list[AcceleratorReader]) -> Reading:
    try:
        return take_reading(readers)
    finally:
        for reader in readers:
            reader.close()


def _inventory_only(reading_json: dict) -> dict:
    return {"readers": reading_json["readers"], "cards": reading_json["cards"]}


def _describe(reading: Reading) -> str:
    lines = ["Readers:"]
    for vendor, status in reading.statuses.items():
        lines.append(f"  {vendor:<10} {status.state:<16} {status.message}")
    samples = {sample.uuid: sample for sample in reading.samples}
    lines.append(f"Cards: {len(reading.cards)}")
    for card in reading.cards:
        lines.append(
            f"  [{card.index}] {card.model}  {card.uuid}  {card.memory_total_mib} MiB  "
            f"{card.device_path or 'no device file'}"
        )
        if sample := samples.get(card.uuid):
            lines.append(f"      {_describe_sample(sample)}")
    return "\n".join(lines)


def _describe_sample(sample: CardSample) -> str:
    def figure(value, unit: str) -> str:
        return "n/a" if value is None else f"{value:g}{unit}"

    ecc = figure(sample.ecc_errors_uncorrected, "")
    health = sample.health + (f" ({sample.health_message})" if sample.health_message else "")
    return (
        f"util {figure(sample.utilization_pct, '%')}  "
        f"memory used {figure(sample.memory_used_mib, ' MiB')}  "
        f"power {figure(sample.power_w, ' W')}  temperature {figure(sample.temperature_c, ' C')}  "
        f"uncorrected ECC {ecc}  health {health}"
    )
