"""What the browser tests share: a Chinese browser, signing in, and the layout check a page
must pass at a desktop's and a phone's width."""

from playwright.sync_api import Page

TIMEOUT_MS = 15_000
WIDTHS = {"desktop": (1440, 900), "phone": (390, 844)}

# What the page must not do, measured in the browser. An element may reach past the viewport's
# edge only inside a container that scrolls sideways (a .table-responsive); a label (button,
# column header, navigation link, badge) is on one line when no piece of its text starts below
# the bottom of its first line, and none is wider than its box (cut off).
LAYOUT_PROBLEMS_JS = r"""
() => {
  const problems = [];
  const width = window.innerWidth;
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const overflow = getComputedStyle(p).overflowX;
      if (overflow === "auto" || overflow === "scroll") return true;
    }
    return false;
  };
  const name = (el) => {
    const id = el.id ? "#" + el.id : "";
    const cls = el.classList.length ? "." + [...el.classList].slice(0, 3).join(".") : "";
    return `${el.tagName.toLowerCase()}${id}${cls} "${(el.innerText || "").trim().slice(0, 30)}"`;
  };
  if (document.scrollingElement.scrollWidth > width) {
    problems.push(`the page is ${document.scrollingElement.scrollWidth}px wide`);
  }
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width <= 1 || box.height <= 1) continue;  // nothing drawn, or visually hidden
    if ((box.right > width + 1 || box.left < -1) && !scrolls(el)) {
      problems.push(`${name(el)} reaches ${Math.round(box.left)}..${Math.round(box.right)}px`);
    }
  }
  const labels = "button, .btn, th, .nav-link, .dropdown-item, .navbar-brand, .badge";
  for (const el of document.querySelectorAll(labels)) {
    if (!el.getClientRects().length || el.closest(".visually-hidden")) continue;
    const range = document.createRange();
    range.selectNodeContents(el);
    const pieces = [...range.getClientRects()].filter((r) => r.width > 1 && r.height > 1);
    if (!pieces.length) continue;
    const first = pieces.reduce((a, b) => (b.top < a.top ? b : a));
    if (pieces.some((r) => r.top >= first.bottom - 1)) problems.push(`${name(el)} wraps`);
    if (el.scrollWidth > el.clientWidth + 1) problems.push(`${name(el)} is cut off`);
  }
  // A sum of money (¥1,234.56, -$5.00) is on one line wherever it is.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/-?[¥$€£]\s?-?[0-9][0-9,]*(\.[0-9]+)?/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const pieces = [...range.getClientRects()].filter((r) => r.width > 1 && r.height > 1);
      if (!pieces.length) continue;
      const first = pieces.reduce((a, b) => (b.top < a.top ? b : a));
      if (pieces.some((r) => r.top >= first.bottom - 1)) {
        problems.push(`${name(node.parentElement)}: ${match[0]} wraps`);
      }
    }
  }
  return problems.slice(0, 20);
}
"""


def log_in(page: Page, base_url: str, account: dict) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill('input[name="login"]', account["email"])
    page.fill('input[name="password"]', account["password"])
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def chinese_browser(browser, base_url: str) -> Page:
    context = browser.new_context(locale="zh-CN", extra_http_headers={"Accept-Language": "zh-CN"})
    context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": base_url}])
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()
