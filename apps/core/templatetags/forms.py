from django import forms, template

register = template.Library()

CHECK_WIDGETS = (forms.CheckboxInput, forms.RadioSelect, forms.CheckboxSelectMultiple)


@register.filter
def is_checkbox(field) -> bool:
    return isinstance(field.field.widget, CHECK_WIDGETS)


@register.filter
def bs(field):
    """Render a bound field's widget with Bootstrap's class, marked invalid when it has errors."""
    widget = field.field.widget
    if isinstance(widget, CHECK_WIDGETS):
        css = "form-check-input"
    elif isinstance(widget, forms.Select):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    return field.as_widget(attrs={"class": css})
