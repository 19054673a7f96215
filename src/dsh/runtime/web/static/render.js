// dsh web: how an answer, a file change and a turn's usage become page elements.
//
// Answers are Markdown written by a model that may have read anything, so they are
// untrusted HTML-to-be. They go through three vendored libraries (static/vendor/README.md):
// markdown-it with `html: false` (raw HTML in the answer stays text), highlight.js for
// code (classes only, never inline styles), then DOMPurify with an allowlist of the tags
// and attributes markdown-it emits, `style` never among them. Nothing is ever loaded on
// the reader's behalf: an image becomes a link to it, and links open in a new tab with no
// referrer. What the page's content security policy forbids (inline script and style, any
// other origin) is never even attempted. Everything else (a diff, a usage line) is built
// with textContent only.
"use strict";

const dshRender = (() => {
  // An answer longer than this is shown as plain text: parsing and laying out megabytes
  // of Markdown would freeze the page, and nobody reads a 5 MB table as a table.
  const MAX_MARKDOWN_CHARS = 256 * 1024;
  const MAX_HIGHLIGHT_CHARS = 100 * 1024;
  const ALLOWED_TAGS = [
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th", "thead",
    "tr", "ul",
  ];
  const ALLOWED_ATTR = ["href", "title", "class", "start", "rel", "target"];

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function escapeHtml(text) {
    return text.replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  function highlight(code, lang) {
    if (code.length > MAX_HIGHLIGHT_CHARS || !window.hljs) return "";
    try {
      if (lang && hljs.getLanguage(lang)) {
        return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
      }
      return hljs.highlightAuto(code).value;
    } catch (e) {
      return "";
    }
  }

  let parser = null;

  function markdown() {
    if (parser || !window.markdownit) return parser;
    parser = window.markdownit({ html: false, linkify: true, typographer: false,
      highlight: (code, lang) => {
        const marked = highlight(code, lang);
        const cls = lang ? ` language-${escapeHtml(lang)}` : "";
        return `<pre><code class="hljs${cls}">${marked || escapeHtml(code)}</code></pre>`;
      } });
    // Table cells are aligned with a class: markdown-it would write style="text-align".
    parser.core.ruler.push("dsh_align", (state) => {
      for (const token of state.tokens) {
        const style = token.attrGet && token.attrGet("style");
        if (!style) continue;
        const align = /text-align:(left|right|center)/.exec(style);
        token.attrs = token.attrs.filter(([name]) => name !== "style");
        if (align) token.attrJoin("class", `align-${align[1]}`);
      }
    });
    // An image would be fetched by the browser: show a link to it instead.
    parser.renderer.rules.image = (tokens, idx) => {
      const token = tokens[idx];
      const src = escapeHtml(token.attrGet("src") || "");
      const alt = escapeHtml(token.content || "image");
      return `<a class="image-link" href="${src}">image: ${alt}</a>`;
    };
    return parser;
  }

  function sanitizer() {
    if (!window.DOMPurify || sanitizer.ready) return window.DOMPurify;
    DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A" && node.hasAttribute("href")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    });
    sanitizer.ready = true;
    return DOMPurify;
  }

  // The answer `text` as sanitized elements (a fragment), or as plain text when it is too
  // long, nested too deeply, or the libraries are missing. Never throws: a bad answer
  // shows as text, and whatever shows, shows all of the text.
  function answer(text) {
    const md = markdown();
    const purify = sanitizer();
    if (!md || !purify) return plain(text, "");
    if (text.length > MAX_MARKDOWN_CHARS) {
      return plain(text, `${text.length.toLocaleString()} characters: shown as plain text`);
    }
    try {
      const env = {};
      const tokens = md.parse(text, env);
      // At its nesting limit markdown-it stops and drops the rest of the text: rather
      // than show part of the answer, show all of it, plainly.
      if (tokens.some((token) => token.level >= md.options.maxNesting - 1)) {
        return plain(text, "nested too deeply to render: shown as plain text");
      }
      return purify.sanitize(md.renderer.render(tokens, md.options, env), {
        ALLOWED_TAGS, ALLOWED_ATTR, FORBID_ATTR: ["style"], ALLOW_DATA_ATTR: false,
        ALLOW_ARIA_ATTR: false, RETURN_DOM_FRAGMENT: true,
      });
    } catch (e) {
      return plain(text, "could not be rendered: shown as plain text");
    }
  }

  function plain(text, note) {
    const fragment = document.createDocumentFragment();
    if (note) fragment.append(el("div", "note", `(${note})`));
    fragment.append(el("div", "plain", text));
    return fragment;
  }

  // -- file changes ----------------------------------------------------------------------

  const DIFF_LINE = [["+++", "meta"], ["---", "meta"], ["@@", "hunk"], ["+", "add"],
                     ["-", "del"], ["\\", "meta"]];

  // A tool result's `data.diff` ({path, kind, added, removed, unified, truncated,
  // omitted?}) as a collapsible, coloured unified diff.
  function diff(change) {
    const box = el("details", "diff");
    box.open = true;
    const summary = el("summary", "", "");
    summary.append(el("span", "path", change.path || "file"));
    if (change.kind === "add") summary.append(el("span", "kind", " new file"));
    if (typeof change.added === "number") {
      summary.append(el("span", "added", ` +${change.added}`),
        el("span", "removed", ` -${change.removed || 0}`));
    }
    box.append(summary);
    if (change.omitted) {
      box.append(el("div", "note", `diff not shown: ${change.omitted}`));
      return box;
    }
    const pre = el("pre", "diff-lines");
    for (const line of String(change.unified || "").split("\n")) {
      if (!line) continue;
      const kind = (DIFF_LINE.find(([prefix]) => line.startsWith(prefix)) || ["", "ctx"])[1];
      pre.append(el("span", kind, line + "\n"));
    }
    box.append(pre);
    if (change.truncated) box.append(el("div", "note", "(the diff is longer; cut here)"));
    return box;
  }

  // -- usage -----------------------------------------------------------------------------

  // Sums of `assistant/message` usage: {inputTokens, outputTokens, cacheHitTokens?,
  // costUsd?, estimated?}; cached and cost stay null until an API reports them.
  function tally() {
    return { steps: 0, input: 0, output: 0, cached: null, cost: null, estimated: false };
  }

  function add(sum, usage) {
    if (!usage) return sum;
    sum.input += usage.inputTokens || 0;
    sum.output += usage.outputTokens || 0;
    if (typeof usage.cacheHitTokens === "number") sum.cached = (sum.cached || 0) + usage.cacheHitTokens;
    if (typeof usage.costUsd === "number") sum.cost = (sum.cost || 0) + usage.costUsd;
    sum.estimated = sum.estimated || usage.estimated === true;
    return sum;
  }

  function money(usd) {
    return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
  }

  function usageText(sum) {
    const mark = sum.estimated ? "~" : "";
    let input = `${mark}${sum.input.toLocaleString("en-US")} in`;
    if (sum.cached !== null && sum.input) {
      input += ` (${Math.floor((sum.cached * 100) / sum.input)}% cached)`;
    }
    return [input, `${mark}${sum.output.toLocaleString("en-US")} out`,
      sum.cost === null ? "cost unknown" : money(sum.cost)].join(" · ");
  }

  function duration(ms) {
    const seconds = ms / 1000;
    if (seconds < 60) return `${seconds.toFixed(1)}s`;
    return `${Math.floor(seconds / 60)}m ${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
  }

  // "5 min ago" for a time given as epoch ms or s, or an ISO string; "" when unknown.
  function age(value, now) {
    if (value === undefined || value === null || value === "") return "";
    let ms = typeof value === "number" ? value : Date.parse(value);
    if (!Number.isFinite(ms)) return "";
    if (typeof value === "number" && ms < 1e12) ms *= 1000;
    const seconds = Math.max(0, ((now || Date.now()) - ms) / 1000);
    if (seconds < 60) return "just now";
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return `${Math.floor(seconds / 86400)} d ago`;
  }

  function when(value) {
    let ms = typeof value === "number" ? value : Date.parse(value);
    if (typeof value === "number" && ms < 1e12) ms *= 1000;
    return Number.isFinite(ms) ? new Date(ms).toLocaleString() : "";
  }

  return { answer, plain, diff, tally, add, usageText, money, duration, age, when, el };
})();
