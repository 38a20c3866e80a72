"""URLs reversed once per process: `url_for` in Python, and the `{% url %}` tag of every
template (a builtin, settings.TEMPLATES, in place of Django's own).

Django's reverse() costs 20-30 µs a call, and a lab's page asks for about 30 links (its menu,
its funding sources, its panels): more than the rest of its header. A link is a function of
the view's name, its arguments, the current application, the script prefix and the URL
conf, all in the key; the URL conf does not change while a process runs. Arguments that
cannot be a key (unhashable) are reversed each time. The cache is bounded: ids in links come
from the database, and an LRU of this size keeps a page's links while dropping the rest.
"""

import functools

from django import template
from django.template.defaulttags import URLNode, url
from django.urls import NoReverseMatch, get_resolver, get_script_prefix, get_urlconf, reverse
from django.utils.html import conditional_escape

register = template.Library()


@functools.lru_cache(maxsize=8192)
def _reversed(view_name, args: tuple, kwargs: tuple, current_app, prefix: str, resolver) -> str:
    # The prefix and the URL conf are read by reverse itself; they are in the key only so
    # that a request under another script prefix or URL conf gets its own. The URL conf is
    # keyed by its resolver, which Django makes anew when the conf changes (clear_url_caches,
    # as override_settings(ROOT_URLCONF=…) does).
    return reverse(
        view_name,
        urlconf=resolver.urlconf_name,
        args=args,
        kwargs=dict(kwargs),
        current_app=current_app,
    )


def url_for(view_name: str, *args, current_app=None, **kwargs) -> str:
    """reverse(view_name, args=args, kwargs=kwargs), remembered per process."""
    key = (view_name, args, tuple(sorted(kwargs.items())), current_app)
    try:
        return _reversed(*key, get_script_prefix(), get_resolver(get_urlconf()))
    except TypeError:  # an argument that cannot be a key
        return reverse(view_name, args=args, kwargs=kwargs, current_app=current_app)


class CachedURLNode(URLNode):
    """Django's {% url %} (its parsing, arguments, `as` and escaping), through url_for."""

    def render(self, context):
        args = tuple(arg.resolve(context) for arg in self.args)
        kwargs = {k: v.resolve(context) for k, v in self.kwargs.items()}
        view_name = self.view_name.resolve(context)
        try:
            current_app = context.request.current_app
        except AttributeError:
            try:
                current_app = context.request.resolver_match.namespace
            except AttributeError:
                current_app = None
        link = ""
        try:
            link = url_for(view_name, *args, current_app=current_app, **kwargs)
        except NoReverseMatch:
            if self.asvar is None:
                raise
        if self.asvar:
            context[self.asvar] = link
            return ""
        return conditional_escape(link) if context.autoescape else link


@register.tag(name="url")
def cached_url(parser, token):
    node = url(parser, token)
    return CachedURLNode(node.view_name, node.args, node.kwargs, node.asvar)
