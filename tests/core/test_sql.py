from decimal import Decimal

import pytest
from django.db import DatabaseError
from django.db.models.signals import post_save

from apps.billing.models import Hold
from apps.core import sql
from apps.tenants.models import Organization
from apps.workloads.models import Workload, WorkloadKind
from tests.factories import OrganizationFactory, WalletFactory, WorkloadFactory

SQL = "SELECT id FROM tenants_organization WHERE id IN ({members}) ORDER BY id"


def ids_in(organizations) -> list[int]:
    members, params = sql.members(organizations)
    return [pk for (pk,) in sql.fetch_all(Organization, SQL.format(members=members), params)]


@pytest.mark.django_db
def test_members_takes_ids_rows_or_a_queryset(park):
    first, second = OrganizationFactory(park=park), OrganizationFactory(park=park)
    OrganizationFactory()  # another park's

    assert ids_in([second.pk, first.pk]) == [first.pk, second.pk]
    assert ids_in([second]) == [second.pk]
    assert ids_in(Organization.objects.filter(park=park)) == [first.pk, second.pk]


@pytest.mark.django_db
def test_no_members_match_nothing(park):
    OrganizationFactory(park=park)

    assert sql.placeholders([]) == "NULL"
    assert ids_in([]) == []
    assert ids_in(Organization.objects.none()) == []


def test_placeholders_one_for_each_value():
    assert sql.placeholders([7, 8, 9]) == "%s, %s, %s"


@pytest.mark.parametrize("value", [Decimal("3.12"), 3.12, "3.12"])
def test_a_numeric_value_is_a_decimal_whatever_the_database_answered(value):
    assert sql.decimal(value) == Decimal("3.12")
    assert sql.decimal(4) == Decimal(4)


@pytest.mark.django_db
def test_rows_inserted_together_point_at_each_other_and_run_their_updates(park):
    organization = OrganizationFactory(park=park)
    wallet = WalletFactory(organization=organization, held_minor=0)
    workload = Workload(organization=organization, kind=WorkloadKind.HOST)
    held = Hold(wallet=wallet, workload=workload, amount_minor=700)

    sql.insert_together(
        workload,
        held,
        # `{1}`: the hold's id, as the statement gives it.
        along=[
            (
                "UPDATE billing_wallet SET held_minor = %s WHERE id = %s AND {1} > 0",
                [700, wallet.pk],
            )
        ],
    )

    assert Hold.objects.get(pk=held.pk).workload_id == workload.pk == held.workload_id
    assert held.workload is workload and not held._state.adding
    assert held.created_at is not None  # auto_now_add, as save sets it
    wallet.refresh_from_db()
    assert wallet.held_minor == 700


@pytest.mark.django_db
def test_rows_updated_together_write_only_their_fields(park):
    organization = OrganizationFactory(park=park)
    wallet = WalletFactory(organization=organization, held_minor=0, balance_minor=100)
    workload = WorkloadFactory(organization=organization)
    wallet.held_minor, wallet.balance_minor = 5, 999  # the balance is not written
    workload.kind = WorkloadKind.TASK

    sql.update_together((wallet, ["held_minor"]), (workload, ["kind"]))

    wallet.refresh_from_db()
    assert (wallet.held_minor, wallet.balance_minor) == (5, 100)
    assert Workload.objects.get(pk=workload.pk).kind == WorkloadKind.TASK


@pytest.mark.django_db
def test_rows_whose_saves_are_listened_for_are_saved_so_the_receiver_hears(park):
    """On every database, as save would: the one statement is only for rows no one hears."""
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append((sender, instance.pk, created))

    post_save.connect(receiver, sender=Workload, dispatch_uid="test-listened")
    try:
        organization = OrganizationFactory(park=park)
        wallet = WalletFactory(organization=organization, held_minor=0)
        workload = Workload(organization=organization, kind=WorkloadKind.HOST)
        sql.insert_together(workload, Hold(wallet=wallet, workload=workload, amount_minor=1))
        workload.kind = WorkloadKind.TASK
        sql.update_together((workload, ["kind"]))
    finally:
        post_save.disconnect(dispatch_uid="test-listened", sender=Workload)

    assert heard == [(Workload, workload.pk, True), (Workload, workload.pk, False)]
    assert Workload.objects.get(pk=workload.pk).kind == WorkloadKind.TASK


@pytest.mark.django_db
def test_a_row_updated_together_that_is_gone_is_an_error(park):
    workload = WorkloadFactory(organization=OrganizationFactory(park=park))
    Workload.objects.filter(pk=workload.pk).delete()

    with pytest.raises(DatabaseError):
        sql.update_together((workload, ["kind"]))


@pytest.mark.django_db
def test_reads_fetched_together_answer_as_each_alone(park):
    first, second = OrganizationFactory(park=park), OrganizationFactory(park=park)
    reads = [
        # Two columns of one name, a numeric and a text: each kept, in order, as its type.
        (
            "SELECT id, park_id AS same, id AS same, CAST(1.50 AS NUMERIC(5, 2)), name "
            "FROM tenants_organization WHERE id IN (%s, %s) ORDER BY id",
            [first.pk, second.pk],
        ),
        ("SELECT id FROM tenants_organization WHERE id = %s", [0]),  # no rows
        ("SELECT SUM(id) FROM tenants_organization WHERE id = %s", [first.pk]),
    ]

    together = sql.fetch_each(Organization, reads)

    assert together == [sql.fetch_all(Organization, *read) for read in reads]
    assert together[0][0] == (first.pk, park.pk, first.pk, Decimal("1.50"), first.name)
    assert together[1] == [] and together[2] == [(first.pk,)]
