// Syntax colouring of code blocks: the code is cut into tokens by one regular expression per language family
// (comments, strings, numbers, keywords, literals), each escaped and wrapped in a <span class="hl-...">.
// Everything else is escaped text, so the result is safe to put into innerHTML whatever the code holds.
// Pure: no DOM; tests/webui/ runs it under Node.

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

const words = (s) => new Set(s.split(' '));

// Each family: its comment and string syntax, its keywords and literals.
const C_LIKE = {
  comment: String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
  string: String.raw`"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|` + '`(?:[^`\\\\]|\\\\.)*`?',
  keywords: words('if else for while do switch case default break continue return goto try catch finally throw ' +
    'new delete class struct enum union interface extends implements public private protected static const ' +
    'constexpr let var function async await yield import export from package namespace using template typename ' +
    'virtual override final void int long short char float double bool unsigned signed auto fn impl trait pub ' +
    'mut match mod use crate self super where func go defer chan select type map range struct sizeof typeof ' +
    'instanceof in of inline extern volatile operator this'),
  literals: words('true false null nullptr undefined NULL None nil'),
};
const HASH = {
  comment: String.raw`#[^\n]*`,
  string: String.raw`"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?`,
  keywords: words('def class return if elif else for while in not and or is import from as with try except ' +
    'finally raise pass break continue lambda yield global nonlocal assert del async await match case ' +
    'then fi do done esac function local export echo end module require begin rescue unless until'),
  literals: words('True False None true false nil'),
};
const SQL = {
  comment: String.raw`--[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
  string: String.raw`'(?:[^']|'')*'?|"(?:[^"])*"?`,
  keywords: words('select from where and or not insert into values update set delete create table drop alter ' +
    'index join left right inner outer on group by order having limit offset as distinct union all primary key ' +
    'foreign references null is in like between case when then else end SELECT FROM WHERE AND OR NOT INSERT ' +
    'INTO VALUES UPDATE SET DELETE CREATE TABLE DROP ALTER INDEX JOIN LEFT RIGHT INNER OUTER ON GROUP BY ORDER ' +
    'HAVING LIMIT OFFSET AS DISTINCT UNION ALL PRIMARY KEY FOREIGN REFERENCES NULL IS IN LIKE BETWEEN CASE ' +
    'WHEN THEN ELSE END'),
  literals: words('true false TRUE FALSE'),
};
const JSONISH = { comment: '', string: String.raw`"(?:[^"\\\n]|\\.)*"?`, keywords: words(''), literals: words('true false null') };
const PLAIN = { comment: '', string: '', keywords: words(''), literals: words('') };

const FAMILIES = {};
for (const l of ('c h cpp cc cxx hpp c++ java js javascript mjs jsx ts typescript tsx go golang rust rs cs csharp ' +
  'swift kotlin kt scala php dart css scss glsl cuda zig').split(' ')) FAMILIES[l] = C_LIKE;
for (const l of ('py python python3 sh bash shell zsh console rb ruby perl pl r yaml yml toml ini dockerfile make ' +
  'makefile cmake nim').split(' ')) FAMILIES[l] = HASH;
for (const l of ['sql', 'mysql', 'postgres', 'postgresql', 'sqlite']) FAMILIES[l] = SQL;
for (const l of ['json', 'jsonc', 'json5']) FAMILIES[l] = JSONISH;

const NUMBER = String.raw`\b(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)[uUlLfF]*\b`;
const WORD = String.raw`[A-Za-z_$][\w$]*`;

const compiled = new Map();
function tokenizer(fam) {
  if (!compiled.has(fam)) {
    const parts = [fam.comment && `(${fam.comment})`, fam.string && `(${fam.string})`, `(${NUMBER})`, `(${WORD})`]
      .map((p, i) => p || `(?!)${i}`);  // an empty family member never matches but keeps the group numbers
    compiled.set(fam, new RegExp(parts.join('|'), 'g'));
  }
  return compiled.get(fam);
}

// The known language of a fence's info string ("js", "Python", "c++ {.class}"), or '' for plain text.
export function languageOf(info) {
  const l = String(info || '').trim().split(/[\s{]/)[0].toLowerCase();
  return FAMILIES[l] ? l : '';
}

// `code` as escaped HTML with its tokens in <span class="hl-comment|hl-string|hl-number|hl-keyword|hl-literal">.
export function highlight(code, lang) {
  const fam = FAMILIES[String(lang || '').toLowerCase()] || PLAIN;
  if (fam === PLAIN) return escapeHtml(code);
  const re = tokenizer(fam);
  re.lastIndex = 0;
  let out = '', at = 0, m;
  while ((m = re.exec(code)) !== null) {
    if (m[0] === '') { re.lastIndex++; continue; }
    out += escapeHtml(code.slice(at, m.index));
    let cls = '';
    if (m[1] !== undefined) cls = 'comment';
    else if (m[2] !== undefined) cls = 'string';
    else if (m[3] !== undefined) cls = 'number';
    else if (fam.keywords.has(m[4])) cls = 'keyword';
    else if (fam.literals.has(m[4])) cls = 'literal';
    out += cls ? `<span class="hl-${cls}">${escapeHtml(m[0])}</span>` : escapeHtml(m[0]);
    at = m.index + m[0].length;
  }
  return out + escapeHtml(code.slice(at));
}
