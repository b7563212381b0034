#!/usr/bin/env bash
# A JSON-schema chat request (greedy) through `tandem serve`, without speculation and with a Q4_0 draft, self
# drafting (3 layers) and n-gram drafting at a fixed draft length of 8: prints tokens/s and drafted/accepted
# tokens from the response timings, three runs each. Target: ../shared/models/stories260K.gguf.
# KIND=lazy: a lazy grammar instead (/completion, grammar_lazy: free text until the word " the", then no letter e).
#   usage: bash bench/structured_speculative.sh   (from the project root, after building); KIND=lazy bash bench/structured_speculative.sh
set -e
./build/bin/tandem quantize ../shared/models/stories260K.gguf /tmp/stories-q4_0.gguf Q4_0 >/dev/null
SCHEMA='{"type":"object","properties":{"story":{"type":"string","maxLength":400},"hero":{"type":"string","maxLength":20},"happy":{"type":"boolean"}},"required":["story","hero","happy"],"additionalProperties":false}'
run() {
  local name="$1"; shift
  ./build/bin/tandem serve -m ../shared/models/stories260K.gguf --port 8399 --temp 0 -t 1 "$@" >/tmp/sb.log 2>&1 &
  local pid=$!; sleep 1.5
  for i in 1 2 3; do
    if [ "${KIND:-schema}" = lazy ]; then
      curl -s localhost:8399/completion -d '{"prompt":"Once upon a time","n_predict":300,"grammar":"root ::= \" the\" [a-df-z ,.]{3,600}","grammar_lazy":true,"grammar_triggers":[{"type":1,"value":" the"}]}' \
        | python3 -c "import json,sys; d=json.load(sys.stdin); t=d['timings']; print('$name', 'tokens', t['predicted_n'], 'tok/s %.0f' % t['predicted_per_second'], 'drafted', t['draft_n'], 'accepted', t['draft_n_accepted'], 'len', len(d['content']))"
    else
      curl -s localhost:8399/v1/chat/completions -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":300,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":$SCHEMA}}}" \
        | python3 -c "import json,sys; d=json.load(sys.stdin); t=d['timings']; print('$name', 'tokens', t['predicted_n'], 'tok/s %.0f' % t['predicted_per_second'], 'drafted', t['draft_n'], 'accepted', t['draft_n_accepted'], 'len', len(d['choices'][0]['message']['content']))"
    fi
  done
  kill $pid; wait $pid 2>/dev/null || true
}
run plain
run draft-q4_0-fixed8 -md /tmp/stories-q4_0.gguf --draft-max 8 --draft-min 1 --draft-p-min 0 --draft-adaptive off
run self-3-fixed8 --spec-type self --draft-layers 3 --draft-max 8 --draft-min 1 --draft-p-min 0 --draft-adaptive off
run ngram-fixed8 --spec-type ngram --draft-max 8 --draft-min 1 --draft-adaptive off
