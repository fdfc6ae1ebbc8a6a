from django import forms, template
from django.forms.boundfield import BoundWidget

register = template.Library()

CHECK_WIDGETS = (forms.CheckboxInput, forms.RadioSelect, forms.CheckboxSelectMultiple)
OPTION_WIDGETS = (forms.RadioSelect, forms.CheckboxSelectMultiple)


@register.filter
def is_checkbox(field) -> bool:
    """A single check box: the label goes after it."""
    return isinstance(field.field.widget, forms.CheckboxInput)


@register.filter
def is_option_list(field) -> bool:
    """Radio buttons or check boxes, one per choice: a legend above, one label per option."""
    return isinstance(field.field.widget, OPTION_WIDGETS)


@register.filter
def options(field) -> list[BoundWidget]:
    """The options of a radio or check box list, each input carrying Bootstrap's class."""
    widget = field.field.widget
    css = "form-check-input" + (" is-invalid" if field.errors else "")
    id_ = widget.attrs.get("id") or field.auto_id
    attrs = field.build_widget_attrs({"id": id_, "class": css} if id_ else {"class": css})
    return [
        BoundWidget(widget, option, field.form.renderer)
        for option in widget.subwidgets(field.html_name, field.value(), attrs=attrs)
    ]


@register.filter
def bs(field, placeholder=None):
    """Render a bound field's widget with Bootstrap's class, marked invalid when it has errors;
    `{{ field|bs:field.label }}` also sets its placeholder."""
    widget = field.field.widget
    if isinstance(widget, CHECK_WIDGETS):
        css = "form-check-input"
    elif isinstance(widget, forms.Select):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    attrs = {"class": css}
    if placeholder:
        attrs["placeholder"] = placeholder
    return field.as_widget(attrs=attrs)
