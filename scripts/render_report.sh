#!/usr/bin/env bash
# Render DIR/report.html in headless Chromium: write a screenshot to OUT.png and print, as one JSON line, what
# the browser saw: {"images": N, "broken_images": [...], "links": N, "broken_links": [...], "first_table_bottom": PX}
# (PX: where the first table ends, from the top of the page at this width).
# Exit 0 when every image loaded and every link resolves, 1 when something is broken, 2 on bad arguments.
# Installs Debian's `chromium` package (apt-get) when no Chromium is on PATH.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 DIR OUT.png" >&2
    exit 2
fi
dir=$(cd "$1" 2>/dev/null && pwd) || { echo "render_report: DIR: no folder $1" >&2; exit 2; }
report="$dir/report.html"
[[ -f $report ]] || { echo "render_report: DIR: no report.html in $dir" >&2; exit 2; }
out=$(realpath -m "$2")
width=${RENDER_WIDTH:-1280}
height=${RENDER_HEIGHT:-2400}

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
    command -v apt-get >/dev/null || { echo "render_report: no Chromium and no apt-get to install it" >&2; exit 3; }
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    echo "render_report: installing chromium (apt-get)" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
    browser=$(command -v chromium)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --no-default-browser-check
       --disable-extensions --disable-background-networking --allow-file-access-from-files
       --user-data-dir="$work/profile" --window-size="$width,$height")

# A copy of the report with a checker appended: after `load` it lists every <img> that did not decode and every
# link that does not resolve (an in-page #anchor without its target, a file that cannot be read, anything on
# the network: the report must be self-contained). <base> keeps relative links pointing into DIR.
checked="$work/report-checked.html"
{
    if grep -q '<head>' "$report"; then
        sed "0,/<head>/s||<head><base href=\"file://$dir/\">|" "$report"
    else
        printf '<base href="file://%s/">\n' "$dir"
        cat "$report"
    fi
    cat <<'JS'
<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const brokenImages = images.filter(i => !(i.complete && i.naturalWidth > 0))
                             .map(i => (i.getAttribute("src") || "").slice(0, 60));
  const links = [...document.querySelectorAll("a[href], link[href], script[src], iframe[src]")];
  const brokenLinks = [];
  for (const el of links) {
    const raw = el.getAttribute("href") ?? el.getAttribute("src");
    if (raw.startsWith("#")) {
      if (raw.length > 1 && !document.getElementById(decodeURIComponent(raw.slice(1)))) brokenLinks.push(raw);
      continue;
    }
    if (raw.startsWith("data:")) continue;
    const url = new URL(raw, document.baseURI);
    if (url.protocol !== "file:") { brokenLinks.push(raw); continue; }
    try {
      const xhr = new XMLHttpRequest();
      xhr.open("GET", url.href, false);
      xhr.send();
    } catch (e) {
      brokenLinks.push(raw);
    }
  }
  const pre = document.createElement("pre");
  pre.id = "render-check";
  const table = document.querySelector("table");  // the report's first table: the verdict
  pre.textContent = JSON.stringify({images: images.length, broken_images: brokenImages,
                                    links: links.length, broken_links: brokenLinks,
                                    first_table_bottom: table ? Math.ceil(table.getBoundingClientRect().bottom) : null});
  document.body.appendChild(pre);
});
</script>
JS
} >"$checked"

dom=$("$browser" "${flags[@]}" --virtual-time-budget=10000 --dump-dom "file://$checked" 2>"$work/stderr") || {
    cat "$work/stderr" >&2
    echo "render_report: chromium failed" >&2
    exit 1
}
result=$(printf '%s' "$dom" | sed -n 's:.*<pre id="render-check">\(.*\)</pre>.*:\1:p' | sed 's/&quot;/"/g; s/&amp;/\&/g')
if [[ -z $result ]]; then
    echo "render_report: the page's check did not run" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
"$browser" "${flags[@]}" --screenshot="$out" "file://$report" 2>"$work/stderr" >/dev/null || {
    cat "$work/stderr" >&2
    echo "render_report: chromium failed to take the screenshot" >&2
    exit 1
}
[[ -s $out ]] || { echo "render_report: no screenshot written" >&2; exit 1; }

echo "$result"
[[ $result == *'"broken_images":[]'*'"broken_links":[]'* ]]
