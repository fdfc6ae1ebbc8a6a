"""The catalog proposed for an enrolled server (apps/agents/proposals.py): flavors of 1, 2, 4, 8…
cards and the whole server that fit it with the server's reserve kept, in a family of its
accelerator model, prices prefilled from the park's, and the images it holds."""

import tomllib
from pathlib import Path

import pytest

from apps.agents import proposals
from apps.agents.proposals import (
    CONFLICT,
    DEFAULT_AGENT_IMAGE,
    EXTEND,
    NEW,
    OFF_SALE,
    ON_SALE,
    RESERVE_RAM_GB,
    RESERVE_VCPU,
    UNPRICED,
    CatalogFacts,
    ExistingFamily,
    ExistingFlavor,
    ExistingImage,
    ServerFacts,
    propose,
)
from tests.factories import FlavorFactory, FlavorFamilyFactory, ImageFactory, PriceFactory

REPO = Path(__file__).resolve().parents[2]


def catalog(**changes) -> CatalogFacts:
    return CatalogFacts(**{"model_slug": "l40s", "model_label": "NVIDIA L40S", **changes})


def existing(pk, count, *, vcpu, ram_gb, price=None, active=True, code=None) -> ExistingFlavor:
    return ExistingFlavor(
        pk=pk,
        code=code or f"l40s.{count}x",
        accelerator_count=count,
        vcpu=vcpu,
        ram_gb=ram_gb,
        system_disk_gb=100,
        is_active=active,
        price_minor=price,
    )


@pytest.mark.parametrize(
    ("cards", "counts"),
    [
        (0, ()),
        (1, (1,)),
        (2, (1, 2)),
        (3, (1, 2, 3)),
        (4, (1, 2, 4)),
        (6, (1, 2, 4, 6)),
        (8, (1, 2, 4, 8)),
        (10, (1, 2, 4, 8, 10)),
    ],
)
def test_one_flavor_per_power_of_two_cards_and_the_whole_server(cards, counts):
    assert proposals.sizes(cards) == counts
    facts = ServerFacts(cards=cards, vcpu=64, ram_gb=512)
    assert tuple(f.accelerator_count for f in propose(facts, catalog()).flavors) == counts


@pytest.mark.parametrize(
    ("cards", "vcpu", "ram_gb"),
    [(1, 16, 128), (2, 32, 256), (4, 64, 503), (8, 128, 1007), (8, 64, 503), (2, 2, 4)],
)
def test_flavors_fit_the_server_and_leave_its_reserve(cards, vcpu, ram_gb):
    facts = ServerFacts(cards=cards, vcpu=vcpu, ram_gb=ram_gb)
    flavors = propose(facts, catalog()).flavors
    for flavor in flavors:
        assert 1 <= flavor.vcpu <= vcpu - RESERVE_VCPU
        assert 1 <= flavor.ram_gb <= ram_gb - RESERVE_RAM_GB
        assert proposals.fits(
            facts,
            accelerator_count=flavor.accelerator_count,
            vcpu=flavor.vcpu,
            ram_gb=flavor.ram_gb,
        )
        assert flavor.system_disk_gb == proposals.DEFAULT_SYSTEM_DISK_GB
        assert flavor.status == NEW
    whole = flavors[-1]
    # The whole server gets all but the reserve; the others their cards' share of it.
    assert (whole.accelerator_count, whole.vcpu, whole.ram_gb) == (
        cards,
        vcpu - RESERVE_VCPU,
        ram_gb - RESERVE_RAM_GB,
    )
    shares = [(f.vcpu / f.accelerator_count, f.ram_gb / f.accelerator_count) for f in flavors]
    assert max(s[0] for s in shares) - min(s[0] for s in shares) <= 1
    assert max(s[1] for s in shares) - min(s[1] for s in shares) <= 1


def test_an_eight_card_server_gets_proportional_flavors():
    facts = ServerFacts(cards=8, vcpu=64, ram_gb=503)
    shapes = [(f.code, f.vcpu, f.ram_gb) for f in propose(facts, catalog()).flavors]
    assert shapes == [
        ("l40s.1x", 7, 62),
        ("l40s.2x", 15, 125),
        ("l40s.4x", 31, 250),
        ("l40s.8x", 63, 501),
    ]


def test_a_two_cpu_four_gb_server_gets_flavors_that_fit():
    """The server the demo's 16 vCPU / 128 GB per card refused with "no capacity"."""
    one = propose(ServerFacts(cards=1, vcpu=2, ram_gb=4), catalog()).flavors
    assert [(f.code, f.accelerator_count, f.vcpu, f.ram_gb) for f in one] == [("l40s.1x", 1, 1, 2)]
    two = propose(ServerFacts(cards=2, vcpu=2, ram_gb=4), catalog()).flavors
    assert [(f.accelerator_count, f.vcpu, f.ram_gb) for f in two] == [(1, 1, 1), (2, 1, 2)]


def test_a_server_too_small_for_a_reserve_gets_no_more_than_it_has():
    flavors = propose(ServerFacts(cards=1, vcpu=1, ram_gb=1), catalog()).flavors
    assert [(f.vcpu, f.ram_gb) for f in flavors] == [(1, 1)]


def test_a_reported_disk_caps_the_system_disk():
    facts = ServerFacts(cards=4, vcpu=32, ram_gb=256, disk_gb=200)
    disks = [f.system_disk_gb for f in propose(facts, catalog()).flavors]
    assert disks == [50, 100, 100]
    tiny = ServerFacts(cards=4, vcpu=32, ram_gb=256, disk_gb=40)
    assert [f.system_disk_gb for f in propose(tiny, catalog()).flavors] == [20, 20, 40]


def test_a_server_without_cards_is_proposed_nothing():
    proposal = propose(ServerFacts(cards=0, vcpu=64, ram_gb=512), catalog())
    assert proposal.flavors == ()
    assert proposal.images == ()
    assert not proposal.to_accept


def test_prices_are_prefilled_per_card_or_left_empty():
    facts = ServerFacts(cards=4, vcpu=32, ram_gb=256)
    priced = propose(facts, catalog(per_card_price_minor=900)).flavors
    assert [f.price_minor for f in priced] == [900, 1800, 3600]
    assert {f.price_minor for f in propose(facts, catalog()).flavors} == {None}


def test_a_family_whose_flavors_fit_is_joined_and_its_flavors_shown_as_they_are():
    family = ExistingFamily(
        pk=7,
        code="l40s",
        name="NVIDIA L40S · l40s",
        flavors=(
            existing(1, 1, vcpu=4, ram_gb=30, price=900),
            existing(2, 2, vcpu=8, ram_gb=60, price=None),
            existing(3, 8, vcpu=64, ram_gb=480, price=7200),  # not a size of this server
        ),
    )
    facts = ServerFacts(cards=4, vcpu=32, ram_gb=256)
    proposal = propose(facts, catalog(families=(family,), per_card_price_minor=900))
    assert (proposal.family_code, proposal.family_id) == ("l40s", 7)
    rows = [(f.code, f.status, f.flavor_id, f.vcpu, f.price_minor) for f in proposal.flavors]
    assert rows == [
        ("l40s.1x", ON_SALE, 1, 4, 900),
        ("l40s.2x", UNPRICED, 2, 8, 1800),
        ("l40s.4x", NEW, None, 31, 3600),
    ]
    assert proposal.to_accept


def test_a_withdrawn_flavor_shows_as_off_sale():
    family = ExistingFamily(
        pk=7, code="l40s", name="L40S", flavors=(existing(1, 1, vcpu=4, ram_gb=30, active=False),)
    )
    proposal = propose(ServerFacts(cards=1, vcpu=8, ram_gb=64), catalog(families=(family,)))
    assert [f.status for f in proposal.flavors] == [OFF_SALE]


def test_a_family_too_big_for_the_server_is_left_for_a_new_one_named_by_its_shape():
    """A family holds one flavor per card count: the demo's 16 vCPU per card cannot take a
    2-CPU server's 1x."""
    family = ExistingFamily(
        pk=7, code="l40s", name="L40S", flavors=(existing(1, 1, vcpu=16, ram_gb=128),)
    )
    facts = ServerFacts(cards=2, vcpu=4, ram_gb=16)
    proposal = propose(
        facts, catalog(families=(family,), family_codes_taken=frozenset({"l40s", "l40s-1c7g"}))
    )
    assert proposal.family_id is None
    assert proposal.family_code == "l40s-1c7g-2"
    assert proposal.family_name == "NVIDIA L40S · l40s-1c7g-2"
    assert [f.code for f in proposal.flavors] == ["l40s-1c7g-2.1x", "l40s-1c7g-2.2x"]
    assert {f.status for f in proposal.flavors} == {NEW}


def test_without_reported_images_the_agents_default_image_is_proposed():
    facts = ServerFacts(cards=1, vcpu=8, ram_gb=64)
    (image,) = propose(facts, catalog()).images
    assert (image.code, image.status) == (DEFAULT_AGENT_IMAGE, NEW)
    assert image.name == "Debian 12 (bookworm) · Python 3.11"
    assert not propose(facts, catalog()).images_reported


@pytest.mark.parametrize(
    ("runs", "same_stack", "status"),
    [(True, True, ON_SALE), (False, True, EXTEND), (False, False, CONFLICT)],
)
def test_an_image_of_the_park_with_that_code_is_reused(runs, same_stack, status):
    images = {
        "debian-12": ExistingImage(
            code="debian-12", name="Debian", runs_on_model=runs, same_stack=same_stack
        )
    }
    facts = ServerFacts(cards=1, vcpu=8, ram_gb=64)
    (image,) = propose(facts, catalog(images=images)).images
    assert (image.status, image.name) == (status, "Debian")


def test_reported_images_are_proposed_as_they_are():
    facts = ServerFacts(cards=1, vcpu=8, ram_gb=64, images=("debian-12", "ubuntu-24.04"))
    proposal = propose(facts, catalog())
    assert [i.code for i in proposal.images] == ["debian-12", "ubuntu-24.04"]
    assert proposal.images_reported


def test_the_images_the_portal_names_are_the_agents_recipes():
    """agent/ is a package of its own: its recipes are read from their files."""
    recipes = REPO / "agent" / "loam_agent" / "hosts" / "recipes"
    assert DEFAULT_AGENT_IMAGE in proposals.AGENT_IMAGES
    for code, (name, _os) in proposals.AGENT_IMAGES.items():
        recipe = tomllib.loads((recipes / f"{code}.toml").read_text())
        assert recipe["description"] == name


# --- read from an enrolled server ---------------------------------------------------------------


@pytest.mark.django_db
def test_proposal_for_an_enrolled_server_reads_its_node_and_the_parks_catalog(agent_world):
    server, _credential = agent_world.enrol(
        "small-01", cards=2, cpu_count=4, memory_total_mib=16384
    )
    proposal = proposals.proposal_for(server)
    assert proposal.facts == ServerFacts(cards=2, vcpu=4, ram_gb=16, card_models=("NVIDIA H200",))
    # The park's family sells 8 vCPU per card: a new family, priced from its 1000 per card.
    assert proposal.family_id is None
    assert proposal.family_code == "h200-sxm-1c7g"
    assert [(f.code, f.vcpu, f.ram_gb, f.price_minor) for f in proposal.flavors] == [
        ("h200-sxm-1c7g.1x", 1, 7, 1000),
        ("h200-sxm-1c7g.2x", 3, 14, 2000),
    ]
    assert [(i.code, i.status) for i in proposal.images] == [("debian-12", ON_SALE)]


@pytest.mark.django_db
def test_the_prefilled_price_prefers_the_servers_region(agent_world):
    server, _credential = agent_world.enrol("big-01", cards=8, memory_total_mib=600 * 1024)
    family = FlavorFamilyFactory(park=agent_world.park, accelerator_model=agent_world.model)
    cheap = FlavorFactory(family=family, accelerator_count=1)
    PriceFactory(region__park=agent_world.park, flavor=cheap, amount_minor=10)  # elsewhere
    catalog_here = proposals.catalog_facts(
        park=agent_world.park, region=agent_world.region, accelerator_model=agent_world.model
    )
    assert catalog_here.per_card_price_minor == 1000
    assert proposals.proposal_for(server).family_code == "a1"  # 8 vCPU / 64 GB per card fit
    ImageFactory(park=agent_world.park, code="other")
    assert set(
        proposals.catalog_facts(
            park=agent_world.park, region=agent_world.region, accelerator_model=agent_world.model
        ).images
    ) == {"debian-12", "other"}
