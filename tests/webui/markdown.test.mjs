// The chat page's Markdown and code colouring (tools/tandem/server/webui/markdown.js, code_highlight.js), under
// Node: the structures chat models write, and that no text can become markup of its own.
import test from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdown, renderInline } from '../../tools/tandem/server/webui/markdown.js';
import { highlight, languageOf } from '../../tools/tandem/server/webui/code_highlight.js';

test('blocks: headings, paragraphs with line breaks, rules, quotes', () => {
  assert.equal(renderMarkdown('# Title\n\nOne\ntwo\n\n---\n\n> said'),
    '<h1>Title</h1><p>One<br>two</p><hr><blockquote><p>said</p></blockquote>');
  assert.equal(renderMarkdown('### Deep ###'), '<h3>Deep</h3>');
});

test('inline: strong, emphasis, strikethrough, code, snake_case left alone', () => {
  assert.equal(renderInline('**b** *i* _j_ ~~s~~ `a*b*c`'), '<strong>b</strong> <em>i</em> <em>j</em> <del>s</del> <code>a*b*c</code>');
  assert.equal(renderInline('snake_case_name and 2*3*4'), 'snake_case_name and 2*3*4');
});

test('lists: nested, ordered with a start, task items, a new list when the kind changes', () => {
  assert.equal(renderMarkdown('- a\n- b\n  - c\n- [x] done\n- [ ] todo'),
    '<ul><li>a</li><li>b<ul><li>c</li></ul></li><li><input type="checkbox" disabled checked aria-label="task"> done</li>' +
    '<li><input type="checkbox" disabled aria-label="task"> todo</li></ul>');
  assert.equal(renderMarkdown('3. x\n4. y\n\n- z'), '<ol start="3"><li>x</li><li>y</li></ol><ul><li>z</li></ul>');
});

test('code: fenced with a language, coloured, with a copy button; an unterminated fence runs to the end', () => {
  const h = renderMarkdown('```python\nx = "<b>"  # note\n```\nafter');
  assert.match(h, /<div class="code"><div class="code-bar"><span>python<\/span><button type="button" class="copy-code"/);
  assert.match(h, /<code class="lang-python">x = <span class="hl-string">&quot;&lt;b&gt;&quot;<\/span>  <span class="hl-comment"># note<\/span><\/code>/);
  assert.match(h, /<p>after<\/p>$/);
  const open = renderMarkdown('text\n```js\nlet a = 1;');
  assert.match(open, /<code class="lang-js"><span class="hl-keyword">let<\/span> a = <span class="hl-number">1<\/span>;<\/code>/);
  assert.match(renderMarkdown('    indented\n    code'), /<pre><code>indented\ncode<\/code><\/pre>/);
});

test('tables with alignment', () => {
  assert.equal(renderMarkdown('| a | b |\n|:--|--:|\n| 1 | 2 |'),
    '<div class="table-wrap"><table><thead><tr><th>a</th><th style="text-align:right">b</th></tr></thead>' +
    '<tbody><tr><td>1</td><td style="text-align:right">2</td></tr></tbody></table></div>');
});

test('links: http(s) and relative kept, other schemes left as text, bare URLs linked', () => {
  assert.equal(renderInline('[x](https://a.example/?q=1&r=2)'),
    '<a href="https://a.example/?q=1&amp;r=2" target="_blank" rel="noopener noreferrer">x</a>');
  assert.equal(renderInline('[x](javascript:alert(1))'), '[x](javascript:alert(1))');
  assert.equal(renderInline('[x](data:text/html,hi)'), '[x](data:text/html,hi)');
  assert.match(renderInline('see https://b.example/p.'), /<a href="https:\/\/b.example\/p"[^>]*>https:\/\/b.example\/p<\/a>\.$/);
});

test('nothing a model writes becomes markup: every < and quote is escaped, in every construct', () => {
  const hostile = [
    '<script>alert(1)</script>', '<img src=x onerror=alert(1)>', '**<b>x</b>**', '`<i>`', '[<svg onload=1>](https://x.example)',
    '[a](https://x.example/"onmouseover="alert(1))', '| <a> | b |\n|---|---|\n| <iframe> | c |', '- <x>\n  - <y>',
    '```\n</code></pre><script>\n```', '> <style>', '# <h1>', 'https://x.example/<script>',
  ];
  for (const h of hostile) {
    const out = renderMarkdown(h);
    for (const [, name, attrs] of out.matchAll(/<\/?([a-z0-9]+)([^>]*)>/g)) {
      assert.match(name, /^(h[1-6]|p|br|hr|blockquote|ul|ol|li|input|div|span|button|pre|code|table|thead|tbody|tr|th|td|a|strong|em|del)$/,
        `${JSON.stringify(h)} made <${name}>: ${out}`);
      // attributes: only those the renderer writes, every value quoted and free of quotes
      const rest = attrs.replace(/\s(class|href|target|rel|type|disabled|checked|aria-label|style|start)(="[^"<>]*")?/g, '');
      assert.equal(rest.trim(), '', `${JSON.stringify(h)} made an attribute: <${name}${attrs}>`);
    }
    assert.doesNotMatch(out, /<[^>]*\son\w+=/i, `${JSON.stringify(h)} made an event attribute: ${out}`);
  }
});

test('highlighting: languages by family, unknown ones escaped only', () => {
  assert.equal(languageOf('C++'), 'c++');
  assert.equal(languageOf('brainfuck'), '');
  assert.equal(highlight('if (a < b) return "x"; // c', 'js'),
    '<span class="hl-keyword">if</span> (a &lt; b) <span class="hl-keyword">return</span> <span class="hl-string">&quot;x&quot;</span>; <span class="hl-comment">// c</span>');
  assert.equal(highlight('SELECT 1 -- n', 'sql'), '<span class="hl-keyword">SELECT</span> <span class="hl-number">1</span> <span class="hl-comment">-- n</span>');
  assert.equal(highlight('<a> if', ''), '&lt;a&gt; if');
});

test('placeholders: text that looks like one stays text (issue 49: it broke a conversation, or copied a link)', () => {
  assert.equal(renderInline('a \u00017\u0001 b'), 'a \uFFFD7\uFFFD b');
  assert.doesNotMatch(renderInline('`c` \u00009\u0000'), /undefined/);
  assert.equal(renderInline('`c` \u00009\u0000'), '<code>c</code> \uFFFD9\uFFFD');
  const twice = renderInline('[l](http://a) \u00010\u0001');
  assert.equal(twice.match(/<a /g).length, 1);
  assert.equal(renderInline('[`x`](http://a)'),
    '<a href="http://a" target="_blank" rel="noopener noreferrer"><code>x</code></a>');
  assert.doesNotThrow(() => renderMarkdown('# \u00013\u0001\n\n- \u00000\u0000 `y`'));
});
