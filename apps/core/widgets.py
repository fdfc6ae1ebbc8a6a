"""Form widgets the pages share."""

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe


class LongSelect(forms.Select):
    """A select written out in Python, for one of many options or one repeated down a table:
    Django renders each option from a template, and 20 rows of a select of 70 regions took most
    of the pools page, a select of a park's 1,000 organizations most of the scheduling policy
    page (issue 37). The same HTML as Select's, without option groups."""

    def render(self, name, value, attrs=None, renderer=None):
        widget = self.get_context(name, value, attrs)["widget"]
        options = format_html_join(
            "",
            '<option value="{}"{}>{}</option>',
            (
                (option["value"], _attributes(option["attrs"]), option["label"])
                for _group, group_options, _index in widget["optgroups"]
                for option in group_options
            ),
        )
        attributes = _attributes(widget["attrs"])
        return format_html('<select name="{}"{}>{}</select>', name, attributes, options)


class InputInPython:
    """An input (mixed into one of Django's Input widgets) written out in Python, the same HTML
    as Django's template: for inputs repeated down a table of forms, where a template (and the
    attributes' template it includes) per input was most of the pools page (issue 37)."""

    def render(self, name, value, attrs=None, renderer=None):
        widget = self.get_context(name, value, attrs)["widget"]
        shown = "" if widget["value"] is None else format_html(' value="{}"', widget["value"])
        return format_html(
            '<input type="{}" name="{}"{}{}>',
            widget["type"],
            name,
            shown,
            _attributes(widget["attrs"]),
        )


class RowHiddenInput(InputInPython, forms.HiddenInput):
    pass


class RowNumberInput(InputInPython, forms.NumberInput):
    pass


class RowCheckboxInput(InputInPython, forms.CheckboxInput):
    pass


def _attributes(attrs: dict) -> str:
    """The attributes as Django's widgets' attrs.html writes them, in their order: a True one as
    its name alone, a False or None one left out."""
    return mark_safe(
        "".join(
            format_html(" {}", name) if value is True else format_html(' {}="{}"', name, value)
            for name, value in attrs.items()
            if value is not False and value is not None
        )
    )
