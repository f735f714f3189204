"""The report's style sheet and script, inlined into every page (no file is fetched).

Every rule is scoped under ``.hsr`` so that the Jupyter fragment styles nothing of the
notebook around it. The script only adds interaction to the table that is already in
the HTML: a toggle per call with calls inside (collapse/expand its subtree), a click
on a folded run of blocks to show them, search by path or class, and sorting by a
column header (the first click sorts numbers largest first and names A to Z, the next
reverses; "tree order" restores the tree). It finds its own report through
``document.currentScript``, so several reports in one notebook do not mix. Without
JavaScript, or printed, every row is shown.
"""

from __future__ import annotations

__all__ = ["CSS", "SCRIPT"]

CSS = """
.hsr{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2330;max-width:1400px}
.hsr h1{font-size:20px;margin:0 0 6px}
.hsr h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #d7dbe3;padding-bottom:3px}
.hsr .facts{border-collapse:collapse;margin:4px 0}
.hsr .facts th{text-align:left;font-weight:600;padding:1px 14px 1px 0;vertical-align:top}
.hsr .facts td{padding:1px 0;font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap}
.hsr nav a{margin-right:12px}
.hsr .controls{margin:6px 0;display:none;gap:10px;align-items:center}
.hsr.js .controls{display:flex}
.hsr .controls input{font:inherit;padding:2px 6px;width:260px}
.hsr .scroll{overflow:auto;max-height:80vh;border:1px solid #d7dbe3}
.hsr table.calls{border-collapse:collapse;font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
.hsr table.calls caption{text-align:left;padding:4px;caption-side:bottom;color:#555}
.hsr table.calls th{position:sticky;top:0;background:#eef1f6;padding:3px 8px;text-align:right;
 white-space:nowrap;cursor:pointer;border-bottom:1px solid #b9c0cc}
.hsr table.calls th[data-kind=txt]{text-align:left}
.hsr table.calls th[aria-sort]::after{content:" \\25BE"}
.hsr table.calls th[aria-sort=ascending]::after{content:" \\25B4"}
.hsr table.calls td{padding:1px 8px;text-align:right;white-space:pre;vertical-align:top;
 border-bottom:1px solid #f0f2f5}
.hsr table.calls td.layer{text-align:left}
.hsr table.calls tfoot td{border-top:1px solid #b9c0cc;font-weight:600}
.hsr tr.fold td{background:#f4f0ff;cursor:pointer}
.hsr tr.fold .hint,.hsr .note{color:#666}
.hsr tr.infold td{background:#faf9ff}
.hsr tr.heavy td{background:#fff4e0}
.hsr tr.raised td.layer,.hsr td.alert{color:#b3261e;font-weight:600}
.hsr .mark{color:#d9822b}
.hsr .sorted td.layer{padding-left:.4em !important}
.hsr button.tg{border:0;background:none;padding:0 3px 0 0;cursor:pointer;font:inherit;width:1.2em}
.hsr .charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:14px}
.hsr figure{margin:0;border:1px solid #e3e6ec;padding:6px;background:#fff}
.hsr figcaption{color:#555;font-size:12px}
.hsr svg.chart{display:block;width:100%;max-width:860px;height:auto}
.hsr svg .ttl{font:600 13px system-ui,sans-serif;fill:#1d2330}
.hsr svg .lbl,.hsr svg .tick,.hsr svg .axis{font:11px system-ui,sans-serif;fill:#333}
.hsr svg .grid{stroke:#e5e8ee}
.hsr svg .axisline{stroke:#888}
.hsr svg .err{stroke:#1d2330;stroke-width:1}
.hsr .problem{border-left:4px solid #b3261e;padding:4px 10px;background:#fdf1f0}
.hsr pre{white-space:pre-wrap}
.hsr img.fmap{image-rendering:pixelated;margin:0 4px 4px 0;border:1px solid #ccd}
.hsr table.lint{border-collapse:collapse;margin:4px 0}
.hsr table.lint th,.hsr table.lint td{padding:2px 8px;text-align:left;vertical-align:top;
 border-bottom:1px solid #eceef2}
.hsr tr.lint-error td:nth-child(2){color:#b3261e;font-weight:600}
@media print{.hsr .controls,.hsr button.tg{display:none !important}
 .hsr .scroll{max-height:none;overflow:visible;border:0}
 .hsr figure{break-inside:avoid}.hsr table.calls th{position:static}}
"""

SCRIPT = r"""(function(){
var box=document.currentScript&&document.currentScript.closest('.hsr');
if(!box)return;box.classList.add('js');
var table=box.querySelector('table.calls');if(!table)return;
var tbody=table.tBodies[0],rows=Array.prototype.slice.call(tbody.rows),tree=rows.slice();
var byIndex={},kids={},collapsed={},open={},sortAt=-1,dir=1;
var search=box.querySelector('.hs-search'),count=box.querySelector('.hs-count');
var reset=box.querySelector('.hs-tree'),heads=table.tHead.rows[0].cells;
rows.forEach(function(r){var i=r.dataset.i,p=r.dataset.p;
 if(i!==undefined)byIndex[i]=r;
 if(i!==undefined&&p!==undefined)(kids[p]=kids[p]||[]).push(r);});
function hidden(r){var p=r.dataset.p;
 while(p!==undefined){if(collapsed[p])return true;var up=byIndex[p];
  if(!up)return false;p=up.dataset.p;}
 return false;}
function refresh(){var q=search?search.value.trim().toLowerCase():'',n=0,all=0;
 rows.forEach(function(r){var fold=r.classList.contains('fold'),show;
  if(!fold)all++;
  if(q)show=!fold&&((r.dataset.path||'').toLowerCase().indexOf(q)>=0||
   (r.dataset.cls||'').toLowerCase().indexOf(q)>=0);
  else if(sortAt>=0)show=!fold;
  else show=!hidden(r)&&(!r.classList.contains('infold')||open[r.dataset.f]);
  r.hidden=!show;if(show&&!fold)n++;});
 if(count)count.textContent=n+' of '+all+' calls shown';}
rows.forEach(function(r){var i=r.dataset.i;
 if(i!==undefined&&kids[i]){var b=document.createElement('button');b.type='button';
  b.className='tg';b.textContent='\u25BE';b.setAttribute('aria-expanded','true');
  b.title='collapse or expand the calls inside';
  b.addEventListener('click',function(e){e.stopPropagation();collapsed[i]=!collapsed[i];
   b.textContent=collapsed[i]?'\u25B8':'\u25BE';b.setAttribute('aria-expanded',String(!collapsed[i]));
   refresh();});
  r.cells[0].insertBefore(b,r.cells[0].firstChild);}
 if(r.classList.contains('fold'))r.addEventListener('click',function(){
  open[r.dataset.f]=!open[r.dataset.f];r.classList.toggle('open',!!open[r.dataset.f]);refresh();});});
function key(r,num){var c=r.cells[sortAt],v=c?c.dataset.v:undefined;
 if(v===undefined||v==='')return null;if(!num)return v;
 var x=parseFloat(v);return isNaN(x)?Infinity:x;}
function sortBy(at){var num=heads[at].dataset.kind==='num';
 if(sortAt===at)dir=-dir;else{sortAt=at;dir=num?-1:1;}
 var keyed=tree.map(function(r,k){return[key(r,num),k,r];});
 keyed.sort(function(a,b){
  if(a[0]===null||b[0]===null)return a[0]===null?(b[0]===null?a[1]-b[1]:1):-1;
  if(a[0]<b[0])return -dir;if(a[0]>b[0])return dir;return a[1]-b[1];});
 rows=keyed.map(function(e){return e[2];});rows.forEach(function(r){tbody.appendChild(r);});
 for(var h=0;h<heads.length;h++)heads[h].removeAttribute('aria-sort');
 heads[at].setAttribute('aria-sort',dir<0?'descending':'ascending');
 table.classList.add('sorted');refresh();}
for(var h=0;h<heads.length;h++)(function(at){
 heads[at].addEventListener('click',function(){sortBy(at);});})(h);
if(reset)reset.addEventListener('click',function(){sortAt=-1;rows=tree.slice();
 rows.forEach(function(r){tbody.appendChild(r);});table.classList.remove('sorted');
 for(var h=0;h<heads.length;h++)heads[h].removeAttribute('aria-sort');refresh();});
if(search)search.addEventListener('input',refresh);
refresh();})();"""
