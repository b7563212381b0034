// Structured outputs with the schemas real tools generate (zod-to-json-schema, zod 4, Pydantic v2, OpenAI strict
// mode, OpenAPI, hand-written draft-07 and 2020-12), each written here as its generator prints it. stories260K
// writes nonsense, but the grammar forces a valid document: every sampled answer must parse and validate with ajv
// (ajv-formats for `format`), through /v1/chat/completions and llama-server's /completion; the greedy answer must
// be the same bytes with no speculation, with a draft model (chains and token trees) and with n-gram drafting.
// Keywords a grammar cannot enforce are a 400 naming them.
import test from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startServer, STORIES, storiesDraft, sanitizerReport } from './helpers.mjs';

const SANITIZED = process.env.TANDEM_SANITIZED === '1' || process.env.TANDEM_SANITIZED === 'true';
const SEEDS = SANITIZED ? [1] : [1, 2, 3];
// The context is 2048; the sampled answers below take 50-700 tokens (an unbounded string of story text is the
// longest), the greedy ones up to ~650 (a fraction that repeats its digit before it ends).
const MAX_TOKENS = 1000;
const PROMPT = 'Fill in the form for Lily.';
const NONE = { type: 'none' };
const CHAIN = { type: 'draft', n_max: 8, n_min: 1, p_min: 0, adaptive: false, tree: false };
const TREE = { type: 'draft', n_max: 8, n_min: 1, p_min: 0, adaptive: false, tree: 'auto' };  // --spec-tree-min-gain 0
const NGRAM = { type: 'ngram' };

// stories260K's habits, nudged by logit_bias so that answers end (the grammar still decides what is allowed;
// the bias only reorders the allowed tokens): it never writes '@' (token 67; without this an email's local part
// runs to the token limit), and after a map entry it always writes another ',' (token 432), so z.record and
// Dict maps would never close.
const AT = { 67: 20 }, FEWER_COMMAS = { 432: -10 };

// Each: `draft` picks the validator (7: ajv's default, draft-07; 2020: ajv/dist/2020), `bad` a document that
// must fail it (so a vacuous validator, or formats that are not checked, cannot pass), `bias` the logit_bias.
const SCHEMAS = [
  {
    // const Signup = z.object({
    //   username: z.string().regex(/^[a-z][a-z0-9_]{2,15}$/), email: z.string().email(),
    //   age: z.number().int().min(13).max(120), plan: z.enum(['free', 'pro', 'team']),
    //   bio: z.string().min(1).max(40).optional(), score: z.number().int().multipleOf(5).min(0).max(100),
    //   newsletter: z.boolean(), prefs: z.record(z.string().regex(/^[a-z]{2,8}$/), z.boolean()),
    // });
    // zodToJsonSchema(Signup)  (zod-to-json-schema, zod 3)
    name: 'zod3_signup', draft: 7, bias: { ...AT, ...FEWER_COMMAS }, bad: { username: 'Lily', email: 'lily@x.org', age: 12, plan: 'free', score: 7, newsletter: true, prefs: {} },
    schema: {
      type: 'object',
      properties: {
        username: { type: 'string', pattern: '^[a-z][a-z0-9_]{2,15}$' },
        email: { type: 'string', format: 'email' },
        age: { type: 'integer', minimum: 13, maximum: 120 },
        plan: { type: 'string', enum: ['free', 'pro', 'team'] },
        bio: { type: 'string', minLength: 1, maxLength: 40 },
        score: { type: 'integer', multipleOf: 5, minimum: 0, maximum: 100 },
        newsletter: { type: 'boolean' },
        prefs: { type: 'object', additionalProperties: { type: 'boolean' }, propertyNames: { pattern: '^[a-z]{2,8}$' } },
      },
      required: ['username', 'email', 'age', 'plan', 'score', 'newsletter', 'prefs'],
      additionalProperties: false,
      $schema: 'http://json-schema.org/draft-07/schema#',
    },
  },
  {
    // const Order = z.object({
    //   id: z.string().regex(/^ORD-\d{6}$/), status: z.enum(['pending', 'shipped', 'delivered']),
    //   quantity: z.int().min(1).max(99), unitPrice: z.number().positive().max(10000).multipleOf(0.01),
    //   currency: z.literal('EUR'),
    //   location: z.tuple([z.number().min(-90).max(90).multipleOf(0.001), z.number().min(-180).max(180).multipleOf(0.001)]),
    //   labels: z.array(z.string().min(1).max(12)).max(3),
    //   notes: z.record(z.string().regex(/^[a-z]{2}$/), z.string().max(20)),
    //   gift: z.boolean().optional(), coupon: z.string().max(10).nullable(),
    // });
    // z.toJSONSchema(Order)  (zod 4: draft 2020-12)
    name: 'zod4_order', draft: 2020, bias: FEWER_COMMAS, bad: { id: 'ORD-12345', status: 'pending', quantity: 1, unitPrice: 1, currency: 'EUR', location: [0, 0], labels: [], notes: {}, coupon: null },
    schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: {
        id: { type: 'string', pattern: '^ORD-\\d{6}$' },
        status: { type: 'string', enum: ['pending', 'shipped', 'delivered'] },
        quantity: { type: 'integer', minimum: 1, maximum: 99 },
        unitPrice: { type: 'number', exclusiveMinimum: 0, maximum: 10000, multipleOf: 0.01 },
        currency: { type: 'string', const: 'EUR' },
        location: {
          type: 'array',
          prefixItems: [{ type: 'number', minimum: -90, maximum: 90, multipleOf: 0.001 }, { type: 'number', minimum: -180, maximum: 180, multipleOf: 0.001 }],
          items: false, minItems: 2, maxItems: 2,
        },
        labels: { maxItems: 3, type: 'array', items: { type: 'string', minLength: 1, maxLength: 12 } },
        notes: { type: 'object', propertyNames: { type: 'string', pattern: '^[a-z]{2}$' }, additionalProperties: { type: 'string', maxLength: 20 } },
        gift: { type: 'boolean' },
        coupon: { anyOf: [{ type: 'string', maxLength: 10 }, { type: 'null' }] },
      },
      required: ['id', 'status', 'quantity', 'unitPrice', 'currency', 'location', 'labels', 'notes', 'coupon'],
      additionalProperties: false,
    },
  },
  {
    // class Role(str, Enum): admin = 'admin'; member = 'member'; guest = 'guest'
    // class Address(BaseModel):
    //     street: str = Field(max_length=30); city: str = Field(min_length=1, max_length=20)
    //     zip: constr(pattern=r'^\d{5}$'); country: Literal['US', 'CA', 'MX'] = 'US'
    // class Pet(BaseModel):
    //     name: str = Field(max_length=12); kind: Literal['cat', 'dog', 'fish']; age: int = Field(ge=0, le=30)
    // class UserProfile(BaseModel):
    //     id: int = Field(ge=1); email: EmailStr; display_name: Optional[str] = Field(default=None, max_length=24)
    //     age: int = Field(ge=0, le=120); points: conint(multiple_of=10, ge=0, le=1000); role: Role
    //     kind: Literal['user']; address: Address; previous_address: Optional[Address] = None
    //     pets: List[Pet] = Field(min_length=1, max_length=3)
    // UserProfile.model_json_schema()  (Pydantic 2)
    name: 'pydantic_user', draft: 2020, bias: AT, bad: { id: 1, email: 'not an email', age: 3, points: 10, role: 'admin', kind: 'user', address: { street: 'a', city: 'b', zip: '12345' }, pets: [{ name: 'x', kind: 'cat', age: 1 }] },
    schema: {
      $defs: {
        Address: {
          properties: {
            street: { maxLength: 30, title: 'Street', type: 'string' },
            city: { maxLength: 20, minLength: 1, title: 'City', type: 'string' },
            zip: { pattern: '^\\d{5}$', title: 'Zip', type: 'string' },
            country: { default: 'US', enum: ['US', 'CA', 'MX'], title: 'Country', type: 'string' },
          },
          required: ['street', 'city', 'zip'],
          title: 'Address',
          type: 'object',
        },
        Pet: {
          properties: {
            name: { maxLength: 12, title: 'Name', type: 'string' },
            kind: { enum: ['cat', 'dog', 'fish'], title: 'Kind', type: 'string' },
            age: { maximum: 30, minimum: 0, title: 'Age', type: 'integer' },
          },
          required: ['name', 'kind', 'age'],
          title: 'Pet',
          type: 'object',
        },
        Role: { enum: ['admin', 'member', 'guest'], title: 'Role', type: 'string' },
      },
      properties: {
        id: { minimum: 1, title: 'Id', type: 'integer' },
        email: { format: 'email', title: 'Email', type: 'string' },
        display_name: { anyOf: [{ maxLength: 24, type: 'string' }, { type: 'null' }], default: null, title: 'Display Name' },
        age: { maximum: 120, minimum: 0, title: 'Age', type: 'integer' },
        points: { maximum: 1000, minimum: 0, multipleOf: 10, title: 'Points', type: 'integer' },
        role: { $ref: '#/$defs/Role' },
        kind: { const: 'user', title: 'Kind', type: 'string' },
        address: { $ref: '#/$defs/Address' },
        previous_address: { anyOf: [{ $ref: '#/$defs/Address' }, { type: 'null' }], default: null, title: 'Previous Address' },
        pets: { items: { $ref: '#/$defs/Pet' }, maxItems: 3, minItems: 1, title: 'Pets', type: 'array' },
      },
      required: ['id', 'email', 'age', 'points', 'role', 'kind', 'address', 'pets'],
      title: 'UserProfile',
      type: 'object',
    },
  },
  {
    // class Endpoint(BaseModel): host: IPv4Address; port: int = Field(ge=1, le=65535)
    // class ServerEvent(BaseModel):
    //     event_id: UUID; occurred_at: datetime; source: Endpoint
    //     latency_ms: float = Field(gt=0, lt=1000, multiple_of=0.1)
    //     window: Tuple[conint(ge=0, le=86400), conint(ge=0, le=86400)]
    //     counters: Dict[constr(max_length=8), conint(ge=0, le=999)] = Field(default_factory=dict)
    //     level: Literal['debug', 'info', 'warn', 'error'] = 'info'
    // ServerEvent.model_json_schema()  (Pydantic 2)
    name: 'pydantic_event', draft: 2020, bias: FEWER_COMMAS, bad: { event_id: 'x', occurred_at: '2024-01-01T00:00:00Z', source: { host: '1.2.3.4', port: 1 }, latency_ms: 1, window: [1, 2] },
    schema: {
      $defs: {
        Endpoint: {
          properties: {
            host: { format: 'ipv4', title: 'Host', type: 'string' },
            port: { maximum: 65535, minimum: 1, title: 'Port', type: 'integer' },
          },
          required: ['host', 'port'],
          title: 'Endpoint',
          type: 'object',
        },
      },
      properties: {
        event_id: { format: 'uuid', title: 'Event Id', type: 'string' },
        occurred_at: { format: 'date-time', title: 'Occurred At', type: 'string' },
        source: { $ref: '#/$defs/Endpoint' },
        latency_ms: { exclusiveMaximum: 1000, exclusiveMinimum: 0, multipleOf: 0.1, title: 'Latency Ms', type: 'number' },
        window: { maxItems: 2, minItems: 2, prefixItems: [{ maximum: 86400, minimum: 0, type: 'integer' }, { maximum: 86400, minimum: 0, type: 'integer' }], title: 'Window', type: 'array' },
        counters: { additionalProperties: { maximum: 999, minimum: 0, type: 'integer' }, propertyNames: { maxLength: 8 }, title: 'Counters', type: 'object' },
        level: { default: 'info', enum: ['debug', 'info', 'warn', 'error'], title: 'Level', type: 'string' },
      },
      required: ['event_id', 'occurred_at', 'source', 'latency_ms', 'window'],
      title: 'ServerEvent',
      type: 'object',
    },
  },
  {
    // OpenAI Structured Outputs, strict mode, as its guide writes schemas: every property required,
    // additionalProperties false on every object, optional fields nullable (a type list; a bounded one as anyOf,
    // which is how zod-to-json-schema writes .nullable() after a check)
    name: 'openai_strict_event', draft: 7, bad: { name: 'x', date: 'y', participants: [], location: null, priority: 'urgent', duration_minutes: null, steps: [] },
    schema: {
      type: 'object',
      properties: {
        name: { type: 'string' },
        date: { type: 'string', format: 'date-time' },
        participants: { type: 'array', items: { type: 'string' }, maxItems: 3 },
        location: { type: ['string', 'null'] },
        priority: { type: 'string', enum: ['low', 'medium', 'high'] },
        duration_minutes: { anyOf: [{ type: 'integer', minimum: 5, maximum: 480 }, { type: 'null' }] },
        steps: {
          type: 'array',
          items: {
            type: 'object',
            properties: { explanation: { type: 'string' }, done: { type: 'boolean' } },
            required: ['explanation', 'done'],
            additionalProperties: false,
          },
          maxItems: 2,
        },
      },
      required: ['name', 'date', 'participants', 'location', 'priority', 'duration_minutes', 'steps'],
      additionalProperties: false,
    },
  },
  {
    // OpenAPI's petstore-expanded Pet: allOf NewPet and its id, as a draft-07 document with definitions (bounds
    // added to keep the answer short; the id's format int64 dropped: tandem refuses formats on integers)
    name: 'openapi_allof_pet', draft: 7, bad: { name: 'Rex' },
    schema: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      definitions: {
        NewPet: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string', maxLength: 20 }, tag: { type: 'string', maxLength: 10 } },
        },
      },
      allOf: [
        { $ref: '#/definitions/NewPet' },
        { type: 'object', required: ['id'], properties: { id: { type: 'integer', minimum: 1, maximum: 1000000 } } },
      ],
    },
  },
  {
    // hand-written 2020-12: a closed tuple (prefixItems, items false) of a timestamp, a level and a bounded reading
    name: 'tuple_reading', draft: 2020, bad: ['2024-01-01T00:00:00Z', 'INFO', 0, 'extra'],
    schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: 'https://example.com/reading.schema.json',
      type: 'array',
      prefixItems: [
        { type: 'string', format: 'date-time' },
        { enum: ['DEBUG', 'INFO', 'WARN'] },
        { type: 'number', exclusiveMinimum: -50, exclusiveMaximum: 50 },
        { type: 'string', format: 'uuid' },
      ],
      items: false,
      minItems: 3,
    },
  },
  {
    // hand-written draft-07 tool arguments: oneOf tagged by a const, exclusiveMinimum, multipleOf a power of ten
    name: 'tool_shape', draft: 7, bad: { shape: { kind: 'circle', radius: 0 }, color: 'red', scale: 15 },
    schema: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      properties: {
        shape: {
          oneOf: [
            { type: 'object', properties: { kind: { const: 'circle' }, radius: { type: 'integer', exclusiveMinimum: 0, maximum: 50 } }, required: ['kind', 'radius'], additionalProperties: false },
            { type: 'object', properties: { kind: { const: 'rect' }, w: { type: 'integer', minimum: 1, maximum: 50 }, h: { type: 'integer', minimum: 1, maximum: 50 } }, required: ['kind', 'w', 'h'], additionalProperties: false },
          ],
        },
        color: { type: 'string', pattern: '^#[0-9a-f]{6}$' },
        scale: { type: 'integer', multipleOf: 10, minimum: 0, maximum: 100 },
        server: { type: 'string', format: 'ipv4' },
      },
      required: ['shape', 'color', 'scale'],
      additionalProperties: false,
    },
  },
];


// Keywords a grammar cannot enforce: a 400 that names them, never ignored.
const REFUSED = [
  // class Team(BaseModel): members: Set[str]  ->  Team.model_json_schema()
  { name: 'pydantic_set', keyword: /'uniqueItems' is not supported/,
    schema: { properties: { members: { items: { type: 'string' }, title: 'Members', type: 'array', uniqueItems: true } }, required: ['members'], title: 'Team', type: 'object' } },
  // hand-written: any user name but "admin"
  { name: 'not_admin', keyword: /'not' is not supported/,
    schema: { type: 'object', properties: { user: { type: 'string', not: { const: 'admin' } } }, required: ['user'] } },
];

function validator(s) {
  // multipleOfPrecision: 0.29 / 0.01 is 28.999999999999996 in floating point, so compare to 1e-9, not exactly
  const opts = { strict: false, multipleOfPrecision: 9 };
  const ajv = s.draft === 2020 ? new Ajv2020(opts) : new Ajv(opts);
  addFormats(ajv);
  return ajv.compile(s.schema);
}

const post = async (base, p, body) => {
  const r = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
};

// One answer { text, cut (stopped by the token limit), timings }, from /v1/chat/completions (`chat`) or /completion.
async function ask(base, s, { chat, temperature, seed, speculative }) {
  const bias = s.bias || {};
  const r = chat
    ? await post(base, '/v1/chat/completions', { messages: [{ role: 'user', content: PROMPT }], max_tokens: MAX_TOKENS, temperature, seed,
      speculative, logit_bias: bias, response_format: { type: 'json_schema', json_schema: { name: s.name, schema: s.schema, strict: true } } })
    : await post(base, '/completion', { prompt: PROMPT, n_predict: MAX_TOKENS, temperature, seed, speculative,
      logit_bias: Object.entries(bias).map(([id, b]) => [Number(id), b]), json_schema: s.schema });
  assert.equal(r.status, 200, `${s.name}: ${r.text}`);
  if (chat) return { text: r.json.choices[0].message.content, cut: r.json.choices[0].finish_reason === 'length', timings: r.json.timings };
  return { text: r.json.content, cut: r.json.stop_type === 'limit', timings: r.json.timings };
}

function check(s, validate, text, what) {
  let doc;
  assert.doesNotThrow(() => { doc = JSON.parse(text); }, `${s.name} ${what}: not JSON: ${text}`);
  assert.ok(validate(doc), `${s.name} ${what}: ${JSON.stringify(validate.errors)}\n${text}`);
}

let srv;
const stats = { tree: 0, ngram: 0 };  // token-tree alternatives and n-gram drafts verified by the greedy tests
// --spec-tree-min-gain 0: TREE verifies every alternative the caps allow, whatever the measured timings
test.before(async () => { srv = await startServer(['-m', STORIES, '-md', storiesDraft(), '-t', '1', '--spec-tree-min-gain', '0']); });
test.after(async () => {
  const code = await srv.stop();
  assert.ok(!sanitizerReport(srv.stderr), srv.stderr.slice(-4000));
  assert.equal(code, 0, srv.stderr.slice(-2000));
});

test('the validators are not vacuous: each rejects its bad document', () => {
  for (const s of SCHEMAS) assert.equal(validator(s)(s.bad), false, s.name);
});

for (const s of SCHEMAS) {
  test(`${s.name}: sampled answers parse and validate, through both endpoints`, async (t) => {
    const validate = validator(s);
    const cuts = [];
    let n = 0;
    for (const seed of SEEDS) {
      // the chat answer without speculation, the /completion one with a draft model's token trees (speculative
      // sampling, adaptive off: the same seed gives the same answer)
      for (const [chat, speculative] of [[true, NONE], [false, TREE]]) {
        const what = `seed ${seed} ${chat ? 'chat' : '/completion'} ${speculative.type}`;
        const a = await ask(srv.base, s, { chat, temperature: 1, seed, speculative });
        n++;
        if (a.cut) cuts.push(what);  // an answer cut by the token limit is incomplete by design
        else check(s, validate, a.text, what);
      }
    }
    if (cuts.length) t.diagnostic(`${s.name}: cut at ${MAX_TOKENS} tokens: ${cuts.join(', ')}`);
    assert.ok(cuts.length * 2 <= n, `${s.name}: ${cuts.length} of ${n} answers cut at ${MAX_TOKENS} tokens: ${cuts.join(', ')}`);
  });

  test(`${s.name}: the greedy answer is the same bytes with a draft model (chains, trees) and with n-gram drafting`, async (t) => {
    const plain = await ask(srv.base, s, { chat: true, temperature: 0, speculative: NONE });
    if (!plain.cut) check(s, validator(s), plain.text, 'greedy');
    else t.diagnostic(`${s.name}: the greedy answer is cut at ${MAX_TOKENS} tokens (compared, not validated)`);
    for (const speculative of [CHAIN, TREE, NGRAM]) {
      const a = await ask(srv.base, s, { chat: true, temperature: 0, speculative });
      assert.equal(a.text, plain.text, `${s.name}: ${JSON.stringify(speculative)}`);
      if (speculative !== NGRAM) assert.ok(a.timings.draft_n > 0, `${s.name}: the draft was used: ${JSON.stringify(a.timings)}`);
      if (speculative === TREE) stats.tree += a.timings.draft_tree_n;
      if (speculative === NGRAM) stats.ngram += a.timings.draft_n;
    }
    const completion = await ask(srv.base, s, { chat: false, temperature: 0, speculative: NONE });
    const completionTree = await ask(srv.base, s, { chat: false, temperature: 0, speculative: TREE });
    assert.equal(completionTree.text, completion.text, `${s.name}: /completion with token trees`);
  });
}

test('speculation was exercised: token-tree alternatives and n-gram drafts were verified', () => {
  assert.ok(stats.tree > 0, JSON.stringify(stats));
  assert.ok(stats.ngram > 0, JSON.stringify(stats));
});

test('keywords a grammar cannot enforce are a 400 naming them, on both endpoints', async () => {
  for (const s of REFUSED) {
    const chat = await post(srv.base, '/v1/chat/completions', { messages: [{ role: 'user', content: PROMPT }],
      response_format: { type: 'json_schema', json_schema: { name: s.name, schema: s.schema, strict: true } } });
    assert.equal(chat.status, 400, `${s.name}: ${chat.text}`);
    assert.match(chat.json.error.message, s.keyword, s.name);
    const completion = await post(srv.base, '/completion', { prompt: PROMPT, json_schema: s.schema });
    assert.equal(completion.status, 400, `${s.name}: ${completion.text}`);
    assert.match(completion.json.error.message, s.keyword, s.name);
  }
});

// RFC 3339's full-date (JSON Schema's `date`, and the date of `date-time`) has no 02-30: the day must exist in its
// month, and 02-29 needs a leap year. stories260K likes "-02-30" (about 1 seed in 3 before the grammar knew the
// month lengths), so this samples many seeds.
test('format date: the day exists in its month', async () => {
  const s = { name: 'date', draft: 2020, schema: { type: 'string', format: 'date' } };
  const validate = validator(s);
  for (let seed = 1; seed <= (SANITIZED ? 10 : 40); seed++) {
    const a = await ask(srv.base, s, { chat: false, temperature: 1, seed, speculative: NONE });
    check(s, validate, a.text, `seed ${seed}`);
  }
});
