"""django-allauth's messages that the portal translates again (issue 35).

allauth's own zh-hans catalogue calls an account 帐号, 帐户 or 账户 and an email 电子邮件, Email
or Email地址; the portal says 账号 and 邮箱 everywhere. The portal's catalogue comes first
(settings.LOCALE_PATHS), so a message translated there wins, but `makemessages` keeps only the
messages it finds in the portal's own sources: marking them here keeps their translations in
locale/zh_Hans/LC_MESSAGES/django.po. Each is allauth's msgid exactly, as its templates and
forms say it (allauth.account and allauth.mfa, the parts the portal uses).
"""

# ruff: noqa: E501 (each message is allauth's msgid, verbatim and whole: easier to compare so)
from django.utils.translation import gettext_noop

ALLAUTH_MESSAGES = [
    gettext_noop("You cannot remove your primary email address."),
    gettext_noop("This email address is already associated with this account."),
    gettext_noop("The email address and/or password you specified are not correct."),
    gettext_noop("A user is already registered with this email address."),
    gettext_noop("You cannot add more than %d email addresses."),
    gettext_noop("The email address is not assigned to any user account."),
    gettext_noop("Your primary email address must be verified."),
    gettext_noop("Marked {email} as verified."),
    gettext_noop("Failed to mark {email} as verified."),
    gettext_noop("Mark selected email addresses as verified"),
    gettext_noop("Accounts"),
    gettext_noop("Email"),
    gettext_noop("Email address"),
    gettext_noop("Username, email or phone"),
    gettext_noop("Username or email"),
    gettext_noop("Email or phone"),
    gettext_noop("Email (again)"),
    gettext_noop("Email address confirmation"),
    gettext_noop("Email (optional)"),
    gettext_noop("You must type the same email each time."),
    gettext_noop("email address"),
    gettext_noop("email addresses"),
    gettext_noop("email confirmation"),
    gettext_noop("email confirmations"),
    gettext_noop(
        "You cannot add an email address to an account protected by two-factor authentication."
    ),
    gettext_noop(
        "You cannot activate two-factor authentication until you have verified your email address."
    ),
    gettext_noop("Please reauthenticate to safeguard your account."),
    gettext_noop("Email Verification"),
    gettext_noop("Enter Email Verification Code"),
    gettext_noop("Use a different email address"),
    gettext_noop("Email Addresses"),
    gettext_noop("The following email addresses are associated with your account:"),
    gettext_noop("Primary"),
    gettext_noop("Re-send Verification"),
    gettext_noop("Add Email Address"),
    gettext_noop("Add Email"),
    gettext_noop("Do you really want to remove the selected email address?"),
    gettext_noop(
        "You are receiving this email because you or someone else tried to signup for an\naccount using email address:\n\n%(email)s\n\nHowever, an account using that email address already exists.  In case you have\nforgotten about this, please use the password forgotten procedure to recover\nyour account:\n\n%(password_reset_url)s"
    ),
    gettext_noop("Account Already Exists"),
    gettext_noop(
        "You are receiving this mail because the following change was made to your account:"
    ),
    gettext_noop(
        "If you do not recognize this change then please take proper security precautions immediately. The change to your account originates from:\n\n- IP address: %(ip)s\n- Browser: %(user_agent)s\n- Date: %(timestamp)s"
    ),
    gettext_noop("Your email has been changed from %(from_email)s to %(to_email)s."),
    gettext_noop("Email Changed"),
    gettext_noop("Your email has been confirmed."),
    gettext_noop("Email Confirmation"),
    gettext_noop(
        "You're receiving this email because user %(user_display)s has given your email address to register an account on %(site_domain)s."
    ),
    gettext_noop(
        "Your email verification code is listed below. Please enter it in your open browser window."
    ),
    gettext_noop("Please Confirm Your Email Address"),
    gettext_noop("Email address %(deleted_email)s has been removed from your account."),
    gettext_noop("Email Removed"),
    gettext_noop(
        "You're receiving this email because you or someone else has requested a password reset for your user account.\nIt can be safely ignored if you did not request a password reset. Click the link below to reset your password."
    ),
    gettext_noop(
        "You are receiving this email because you, or someone else, tried to access an account with email %(email)s. However, we do not have any record of such an account in our database."
    ),
    gettext_noop("If it was you, you can sign up for an account using the link below."),
    gettext_noop("Email Address"),
    gettext_noop("Current email"),
    gettext_noop("Your email address is still pending verification."),
    gettext_noop("Change Email"),
    gettext_noop("Confirm Email Address"),
    gettext_noop(
        'Please confirm that <a href="mailto:%(email)s">%(email)s</a> is an email address for user %(user_display)s.'
    ),
    gettext_noop(
        "Unable to confirm %(email)s because it is already confirmed by a different account."
    ),
    gettext_noop(
        'This email confirmation link expired or is invalid. Please <a href="%(email_url)s">issue a new email confirmation request</a>.'
    ),
    gettext_noop("You cannot remove your primary email address (%(email)s)."),
    gettext_noop("Confirmation email sent to %(email)s."),
    gettext_noop("You have confirmed %(email)s."),
    gettext_noop("Removed email address %(email)s."),
    gettext_noop("Primary email address set."),
    gettext_noop(
        "Forgotten your password? Enter your email address below, and we'll send you an email allowing you to reset it."
    ),
    gettext_noop(
        "We have sent you an email. If you have not received it please check your spam folder. Otherwise contact us if you do not receive it in a few minutes."
    ),
    gettext_noop(
        "You currently do not have any email address set up. You should really add an email address so you can receive notifications, reset your password, etc."
    ),
    gettext_noop("Verify Your Email Address"),
    gettext_noop(
        "This part of the site requires us to verify that\nyou are who you claim to be. For this purpose, we require that you\nverify ownership of your email address. "
    ),
    gettext_noop(
        "We have sent an email to you for\nverification. Please click on the link inside that email. If you do not see the verification email in your main inbox, check your spam folder. Otherwise\ncontact us if you do not receive it within a few minutes."
    ),
    gettext_noop(
        '<strong>Note:</strong> you can still <a href="%(email_url)s">change your email address</a>.'
    ),
    gettext_noop(
        "Your account is protected by two-factor authentication. Please enter an authenticator code:"
    ),
    gettext_noop("You are about to generate a new set of recovery codes for your account."),
    gettext_noop(
        "To protect your account with two-factor authentication, scan the QR code below with your authenticator app. Then, input the verification code generated by the app below."
    ),
    gettext_noop(
        "You are about to create a passkey for your account. As you can add additional keys later on, you can use a descriptive name to tell the keys apart."
    ),
]
