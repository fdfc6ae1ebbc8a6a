"""The lock-order check itself (tests/lock_order.py): it must catch what it is there to catch.
The suite runs under it on PostgreSQL (tests/conftest.py); these tests break the order on
purpose, so the suite's own check is off for them."""

import pytest
from django.db import transaction

from apps.billing.models import Wallet
from apps.core.transactions import LOCK_ORDER, lock, lock_all
from apps.orchestration.models import Node
from apps.tenants.models import Organization
from tests.factories import MembershipFactory, NodeFactory, OrganizationFactory
from tests.lock_order import recording

pytestmark = [pytest.mark.postgres, pytest.mark.breaks_lock_order, pytest.mark.django_db]


def wallet_of(organization):
    return Wallet.objects.get_or_create(organization=organization)[0]


def test_a_model_locked_after_one_declared_later_is_out_of_order():
    organization = OrganizationFactory()
    wallet = wallet_of(organization)
    with recording() as recorder, transaction.atomic():
        lock(Wallet, wallet.pk)
        lock(Organization, organization.pk)
    ((seen, late),) = recorder.out_of_order
    assert (seen.label, late.label) == ("billing.Wallet", "tenants.Organization")
    assert late.rows == (organization.pk,)


def test_the_declared_order_is_taken_without_complaint():
    organization = OrganizationFactory()
    wallet = wallet_of(organization)
    with recording() as recorder, transaction.atomic():
        lock(Organization, organization.pk)
        lock(Wallet, wallet.pk)
        lock(Organization, organization.pk)  # held already: waits for nobody
    assert recorder.out_of_order == []


def test_rows_of_one_model_taken_against_their_id_order_are_out_of_order():
    low, high = NodeFactory(), NodeFactory()
    with recording() as recorder, transaction.atomic():
        lock(Node, high.pk)
        lock(Node, low.pk)
    assert [(seen.rows, late.rows) for seen, late in recorder.out_of_order] == [
        ((high.pk,), (low.pk,))
    ]
    with recording() as recorder, transaction.atomic():
        lock_all(Node, [high.pk, low.pk])  # one statement, in id order
    assert recorder.out_of_order == []


def test_a_model_with_no_declared_place_is_refused_beside_another():
    """A transaction that locks two models must say their order; a statement that found no
    row locked nothing."""
    organization = OrganizationFactory()
    assert "tenants.Membership" not in LOCK_ORDER
    with recording() as recorder, transaction.atomic():
        lock(Organization, organization.pk)
        list(organization.memberships.select_for_update(no_key=True))
    assert recorder.out_of_order == []
    MembershipFactory(organization=organization)
    with recording() as recorder, transaction.atomic():
        lock(Organization, organization.pk)
        list(organization.memberships.select_for_update(no_key=True))
    assert [late.label for _seen, late in recorder.out_of_order] == ["tenants.Membership"]


def test_each_use_case_is_judged_alone():
    """Two use cases in one test: the second starts afresh (its own transaction)."""
    organization = OrganizationFactory()
    wallet = wallet_of(organization)
    with recording() as recorder:
        with transaction.atomic():
            lock(Wallet, wallet.pk)
        with transaction.atomic():
            lock(Organization, organization.pk)
    assert recorder.out_of_order == []
