// Markdown to HTML for the chat page: the CommonMark subset chat models write (headings, paragraphs with their
// line breaks kept, emphasis, strong, strikethrough, inline code, links, fenced and indented code with colouring
// and a copy button, block quotes, nested lists, task items, tables, rules).
// Safety first: the text is escaped before any markup is added, so nothing a model writes can become an element
// or an attribute of its own; links keep only http(s), mailto and relative targets. An unterminated fence (a
// stream in progress) runs to the end. Pure: no DOM; tests/webui/ runs it under Node.
import { escapeHtml, highlight, languageOf } from './code_highlight.js';

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`]*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

function safeUrl(url) {
  const u = url.trim();
  if (/^(https?:|mailto:)/i.test(u)) return u;
  if (/^[a-z][a-z0-9+.-]*:/i.test(u) || u.startsWith('//')) return null;  // javascript:, data:, other schemes
  return u;
}

// Inline markup of one block's text (escaped here). Code spans and links are set aside as placeholders (\u0000N\u0000,
// \u0001N\u0001) while the rest is marked up; those two characters are replaced in the input first, so that no text
// can name a placeholder (model text once broke a conversation for good, or copied another link anywhere).
export function renderInline(text) {
  return inline(String(text).replace(/[\u0000\u0001]/g, '\uFFFD'), []);
}

// codes: the code spans of the whole block (a link's label, marked up on its own, refers to them)
function inline(text, codes) {
  // code spans first: their content is literal
  let s = text.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => {
    codes.push(`<code>${escapeHtml(code.replace(/^ (.*) $/s, '$1'))}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const links = [];
  s = s.replace(/\[([^\]\n]+)\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g, (all, label, url) => {
    const href = safeUrl(url);
    if (href === null) return all;
    links.push([inline(label, codes), href]);
    return `\u0001${links.length - 1}\u0001`;
  });
  s = s.replace(/\bhttps?:\/\/[^\s<>()\u0000\u0001]+[^\s<>()\u0000\u0001.,;:!?'"]/g, (url) => {
    links.push([escapeHtml(url), url]);
    return `\u0001${links.length - 1}\u0001`;
  });
  s = escapeHtml(s);
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>')
    .replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>')
    .replace(/ {2,}\n|\\\n|\n/g, '<br>');
  s = s.replace(/\u0001(\d+)\u0001/g, (_, i) => {
    const [label, href] = links[Number(i)];
    return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${label}</a>`;
  });
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

function codeBlock(code, info) {
  const lang = languageOf(info);
  const label = escapeHtml(String(info || '').trim().split(/\s/)[0] || 'text');
  return `<div class="code"><div class="code-bar"><span>${label}</span>` +
    `<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>` +
    `<pre><code${lang ? ` class="lang-${lang}"` : ''}>${highlight(code, lang)}</code></pre></div>`;
}

function splitRow(line) {
  let l = line.trim();
  if (l.startsWith('|')) l = l.slice(1);
  if (l.endsWith('|') && !l.endsWith('\\|')) l = l.slice(0, -1);
  return l.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(lines) {
  const head = splitRow(lines[0]);
  const align = splitRow(lines[1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : ''));
  const cell = (tag, c, i) => `<${tag}${align[i] ? ` style="text-align:${align[i]}"` : ''}>${renderInline(c)}</${tag}>`;
  let h = '<div class="table-wrap"><table><thead><tr>' + head.map((c, i) => cell('th', c, i)).join('') + '</tr></thead><tbody>';
  for (const row of lines.slice(2)) {
    const cells = splitRow(row);
    h += '<tr>' + head.map((_, i) => cell('td', cells[i] ?? '', i)).join('') + '</tr>';
  }
  return h + '</tbody></table></div>';
}

function list(lines) {
  // lines[0] is an item; items at its indentation make the list, deeper lines belong to the item before
  const first = lines[0].match(ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  const items = [];
  for (const line of lines) {
    const m = line.match(ITEM);
    if (m && m[1].length <= indent + 1 && /\d/.test(m[2]) === ordered) items.push([m[3]]);
    else items[items.length - 1].push(line.replace(new RegExp(`^ {0,${indent + 4}}`), ''));
  }
  const tag = ordered ? 'ol' : 'ul';
  let h = `<${tag}${ordered && start !== 1 ? ` start="${start}"` : ''}>`;
  for (const item of items) {
    let body = item.join('\n');
    let box = '';
    const task = body.match(/^\[( |x|X)\]\s+/);
    if (task) {
      box = `<input type="checkbox" disabled${task[1] === ' ' ? '' : ' checked'} aria-label="task"> `;
      body = body.slice(task[0].length);
    }
    const inner = renderBlocks(body.split('\n'));
    // a one-paragraph item is written without its <p>
    const tight = inner.startsWith('<p>') && inner.indexOf('<p>', 1) < 0 ? inner.replace(/^<p>/, '').replace('</p>', '') : inner;
    h += `<li>${box}${tight}</li>`;
  }
  return h + `</${tag}>`;
}

function renderBlocks(lines) {
  let html = '';
  let i = 0;
  const isBlockStart = (l) => FENCE.test(l) || HEADING.test(l) || RULE.test(l) || QUOTE.test(l) || ITEM.test(l);
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*$/.test(line)) { i++; continue; }
    let m;
    if ((m = line.match(FENCE))) {
      const fence = m[1];
      const close = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`);
      const body = [];
      i++;
      while (i < lines.length && !close.test(lines[i])) body.push(lines[i++]);
      i++;  // the closing fence (or the end: a stream still writing it)
      html += codeBlock(body.join('\n'), m[2]);
    } else if ((m = line.match(HEADING))) {
      const n = m[1].length;
      html += `<h${n}>${renderInline(m[2] || '')}</h${n}>`;
      i++;
    } else if (RULE.test(line)) {
      html += '<hr>';
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = lines[i].match(QUOTE))) { body.push(m[1]); i++; }
      html += `<blockquote>${renderBlocks(body)}</blockquote>`;
    } else if (ITEM.test(line)) {
      const first = line.match(ITEM);
      const indent = first[1].length;
      const ordered = /\d/.test(first[2]);
      // an item of this list: at its indentation, of its kind (a bullet after numbers starts another list)
      const sibling = (l) => {
        const mm = l.match(ITEM);
        return mm && mm[1].length <= indent + 1 ? (/\d/.test(mm[2]) === ordered ? 1 : -1) : 0;
      };
      const body = [line];
      i++;
      // the list goes on through deeper lines, further items, and blank lines followed by either
      while (i < lines.length) {
        const l = lines[i];
        const sib = sibling(l);
        if (sib === 1) { body.push(l); i++; continue; }
        if (sib === -1) break;
        if (/^\s*$/.test(l)) {
          const next = lines[i + 1];
          if (next !== undefined && (/^\s{2,}\S/.test(next) || sibling(next) === 1)) { body.push(''); i++; continue; }
          break;
        }
        if (/^\s+\S/.test(l) || !isBlockStart(l)) { body.push(l); i++; continue; }
        break;
      }
      html += list(body);
    } else if (/^ {4}/.test(line)) {
      const body = [];
      while (i < lines.length && (/^ {4}/.test(lines[i]) || /^\s*$/.test(lines[i]))) body.push(lines[i++].slice(4));
      while (body.length && body[body.length - 1] === '') body.pop();
      html += codeBlock(body.join('\n'), '');
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const rows = [line, lines[i + 1]];
      i += 2;
      while (i < lines.length && lines[i].includes('|') && !/^\s*$/.test(lines[i])) rows.push(lines[i++]);
      html += table(rows);
    } else {
      const para = [];
      while (i < lines.length && !/^\s*$/.test(lines[i]) && (para.length === 0 || !isBlockStart(lines[i]))) para.push(lines[i++]);
      html += `<p>${renderInline(para.join('\n'))}</p>`;
    }
  }
  return html;
}

// The HTML of a whole Markdown text.
export function renderMarkdown(text) {
  return renderBlocks(String(text ?? '').replace(/\r\n?/g, '\n').replace(/\t/g, '    ').split('\n'));
}
