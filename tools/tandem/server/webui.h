// The chat page served at GET / (no external resources).
#pragma once

namespace tandem::server {

inline const char* kWebUi = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tandem chat</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#222}
header{background:#243447;color:#fff;padding:10px 16px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}
header h1{font-size:18px;margin:0} header label{font-size:13px}
header input{width:70px}
#log{max-width:860px;margin:16px auto;padding:0 12px}
.msg{margin:10px 0;padding:10px 12px;border-radius:8px;white-space:pre-wrap;line-height:1.4}
.user{background:#dbe9ff}.assistant{background:#fff;border:1px solid #ddd}
.stats{font-size:12px;color:#666;margin-top:6px}
form{max-width:860px;margin:0 auto 24px;padding:0 12px;display:flex;gap:8px}
textarea{flex:1;height:60px;font:inherit;padding:8px}
button{padding:0 18px;font:inherit}
</style></head><body>
<header><h1>tandem</h1>
<label>temperature <input id="temp" type="number" step="0.1" min="0" max="2" value="0.7"></label>
<label>draft max <input id="dmax" type="number" min="0" max="64" value="16"></label>
<label>max tokens <input id="maxt" type="number" min="1" max="4096" value="256"></label>
<label>API key <input id="key" type="password" style="width:120px"></label>
<span id="model"></span></header>
<div id="log"></div>
<form id="f"><textarea id="input" placeholder="Type a message"></textarea><button id="send" type="submit">Send</button></form>
<script>
const log = document.getElementById('log'); const history = [];
const key = document.getElementById('key'); key.value = localStorage.getItem('tandem-key') || '';
key.onchange = () => localStorage.setItem('tandem-key', key.value);
function headers(){ const h={'Content-Type':'application/json'}; if(key.value) h['Authorization']='Bearer '+key.value; return h; }
fetch('/v1/models',{headers:headers()}).then(r=>r.json()).then(j=>{document.getElementById('model').textContent=j.data[0].id;}).catch(()=>{});
function add(role, text){ const d=document.createElement('div'); d.className='msg '+role; d.textContent=text; log.appendChild(d); return d; }
document.getElementById('f').onsubmit = async (e) => {
  e.preventDefault(); const input=document.getElementById('input'); const text=input.value.trim(); if(!text) return;
  input.value=''; add('user', text); history.push({role:'user', content:text});
  const out = add('assistant', ''); const stats=document.createElement('div'); stats.className='stats'; out.after(stats);
  const body = {messages:history, stream:true, stream_options:{include_usage:true},
    temperature:parseFloat(document.getElementById('temp').value), max_tokens:parseInt(document.getElementById('maxt').value),
    speculative:{n_max:parseInt(document.getElementById('dmax').value)}};
  const t0 = performance.now(); let answer=''; let timings=null;
  try {
    const r = await fetch('/v1/chat/completions',{method:'POST',headers:headers(),body:JSON.stringify(body)});
    if(!r.ok){ out.textContent='error '+r.status+': '+(await r.text()); return; }
    const reader=r.body.getReader(); const dec=new TextDecoder(); let buf='';
    for(;;){ const {value,done}=await reader.read(); if(done) break; buf+=dec.decode(value,{stream:true});
      let i; while((i=buf.indexOf('\n\n'))>=0){ const ev=buf.slice(0,i); buf=buf.slice(i+2);
        if(!ev.startsWith('data: ')) continue; const data=ev.slice(6); if(data==='[DONE]') continue;
        const j=JSON.parse(data); if(j.timings) timings=j.timings;
        if(j.choices && j.choices[0] && j.choices[0].delta && j.choices[0].delta.content){ answer+=j.choices[0].delta.content; out.textContent=answer; } } }
  } catch(err){ out.textContent+=' [error: '+err+']'; }
  history.push({role:'assistant', content:answer});
  if(timings){ const acc = timings.draft_n ? (100*timings.draft_n_accepted/timings.draft_n).toFixed(1)+'%' : 'n/a';
    stats.textContent = timings.predicted_n+' tokens, '+timings.predicted_per_second.toFixed(1)+' tokens/s, draft acceptance '+acc; }
  else stats.textContent = ((performance.now()-t0)/1000).toFixed(2)+' s';
};
</script></body></html>)HTML";

}  // namespace tandem::server
