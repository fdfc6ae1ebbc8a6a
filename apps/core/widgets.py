"""Form widgets the pages share."""

from django import forms
from django.forms.utils import flatatt
from django.utils.html import format_html, format_html_join


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
                (option["value"], flatatt(option["attrs"]), option["label"])
                for _group, group_options, _index in widget["optgroups"]
                for option in group_options
            ),
        )
        attributes = flatatt(widget["attrs"])
        return format_html('<select name="{}"{}>{}</select>', name, attributes, options)
