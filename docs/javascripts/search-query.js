// What reaches Material's search worker. Loaded before Material's bundle (theme/overrides/main.html),
// so that the worker the bundle creates is the one defined here. Which pages it searches is decided at build
// time: each language has its own index (theme/hooks/search_per_language.py), which also carries the language's
// synonyms (theme/hooks/search_synonyms.py).

// Material reads the query on keyup only. Text that arrives without a key release (committed Hangul,
// paste, voice, autofill) was never searched: forward each input event on the box as a keyup.
document.addEventListener("input", (event) => {
  const box = event.target;
  if (box instanceof HTMLInputElement && box.matches("[data-md-component=search-query]")) {
    box.dispatchEvent(new KeyboardEvent("keyup"));
  }
});

// Korean particles (조사) attach to the noun: "파이프라인을" is "파이프라인" + "을". The index holds the forms
// the pages use, and Material matches word prefixes, so search the noun. A stripped word is a prefix of
// the typed one: this only widens a search, it never loses a match.
const PARTICLES = ["에서는", "에서", "으로", "까지", "부터", "에게", "처럼", "보다", "마다", "에는", "을", "를", "이", "가",
  "은", "는", "의", "에", "로", "와", "과", "도", "만"];
// A Korean word may open with digits the index keeps with it: "2차원 메시", "3단계"; typed together, "2차원메시"
const HANGUL_WORD = /^[0-9]*[\uAC00-\uD7A3]+$/;
const HANGUL_START = /^[0-9]*[\uAC00-\uD7A3]+/;
const LATIN_WITH_PARTICLE = /^([A-Za-z0-9_.]+)([\uAC00-\uD7A3]+)$/;  // "NCCL로", "OOM이"
const PLAIN_WORD = /^[\p{L}\p{N}_.\-]+$/u;  // no query syntax (+, -, *, ~, ^, :, quotes) to keep as typed

function stripParticle(word) {
  const particle = PARTICLES.find((p) => word.endsWith(p) && word.length - p.length >= 2);
  return particle ? word.slice(0, -particle.length) : word;
}

// The index as Material hands it to its worker (the setup message, below): its words, read on the first query.
let index = null;
let vocabulary = null;

function words() {
  if (!vocabulary && index) {
    const separator = new RegExp(index.config.separator);
    const tokens = new Set();
    for (const doc of index.docs) {
      for (const field of [doc.title, doc.text]) {
        for (const token of String(field ?? "").replace(/<[^>]*>/g, " ").toLowerCase().split(separator)) {
          if (token) tokens.add(token);
        }
      }
    }
    const whole = new Set(Object.keys(synonyms()).filter((typed) => HANGUL_WORD.test(typed)));
    for (const token of tokens) {
      const hangul = HANGUL_START.exec(token)?.[0];
      if (hangul) whole.add(hangul).add(stripParticle(hangul));
    }
    vocabulary = { sorted: [...tokens].sort(), whole };
  }
  return vocabulary;
}

function synonyms() {
  return index?.config?.synonyms ?? {};
}

// Some word of the index starts with it: Material's search (which matches word prefixes) finds it.
function indexed(prefix) {
  const { sorted } = words();
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (sorted[middle] < prefix) low = middle + 1;
    else high = middle;
  }
  return low < sorted.length && sorted[low].startsWith(prefix);
}

// Korean writes a term of two nouns with or without the space (기울기 누적, 기울기누적); the index holds the
// words as the pages spaced them. Split a word the index lacks into the fewest words it holds, as Material
// splits Chinese against the index: every part whole and two syllables or more, but the last, which may be
// the start of a word (the reader may still be typing). Null when no split exists.
function split(word) {
  const { whole } = words();
  const best = [[]];  // best[i]: the fewest whole words that make word.slice(0, i)
  for (let i = 2; i < word.length; i++) {
    for (let j = i - 2; j >= 0; j--) {
      if (best[j] && whole.has(word.slice(j, i)) && (!best[i] || best[j].length + 1 < best[i].length)) {
        best[i] = [...best[j], word.slice(j, i)];
      }
    }
  }
  let found = null;
  let rank = null;
  for (let j = 2; j < word.length; j++) {
    const last = word.slice(j);
    if (!best[j] || !(whole.has(last) || indexed(last))) continue;
    const candidate = [best[j].length + 1, whole.has(last) ? 0 : 1];  // fewer parts, then a whole last word
    if (!rank || candidate[0] < rank[0] || (candidate[0] === rank[0] && candidate[1] < rank[1])) {
      [found, rank] = [[...best[j], last], candidate];
    }
  }
  return found;
}

// What to search for what the reader typed: one term ("+" on each of its words: all must be found, as if it
// were typed in quotes), or several (any of their words).
function clauses(searched, typed) {
  if (searched.length > 1) {
    // a typed word of two letters (TP, AC) as a whole word, not as the start of every word that begins with it:
    // "ac^1" (a boost of 1 changes no score) is a form Material sends on without adding "*"
    const terms = [...new Set(searched.join(" ").split(/\s+/))];
    return terms.map((term) => (term === typed && term.length <= 2 ? `${term}^1` : term));
  }
  const terms = searched[0].split(/\s+/);
  return terms.length > 1 ? terms.map((term) => `+${term}*`) : terms;
}

function searchWord(word) {
  const latin = LATIN_WITH_PARTICLE.exec(word);
  if (latin && PARTICLES.includes(latin[2])) word = latin[1];  // "NCCL로": NCCL
  const hangul = HANGUL_WORD.test(word);
  const noun = hangul ? stripParticle(word) : word;
  const searched = synonyms()[word.toLowerCase()] ?? synonyms()[noun];
  if (searched) return clauses(searched, word.toLowerCase());
  if (!hangul || !vocabulary || indexed(noun)) return [noun];
  const parts = split(noun) ?? split(word);
  if (!parts) return [noun];
  const terms = parts.map((part) => {
    const same = synonyms()[part];
    return same?.length === 1 ? same[0] : part;  // 그래디언트누적: 기울기 누적
  });
  return clauses([terms.join(" ")]);
}

function searchQuery(query) {
  words();
  const typed = query.trim().split(/\s+/).filter(Boolean);
  const out = [];
  for (let i = 0; i < typed.length;) {
    if (!PLAIN_WORD.test(typed[i])) {
      out.push(typed[i++]);
      continue;
    }
    // the longest run of typed words the synonyms name (시간 초과, out of memory), the last one's particle aside
    let length = Math.min(4, typed.length - i);
    for (; length > 1; length--) {
      const run = typed.slice(i, i + length);
      const last = run.pop();
      const phrase = [...run, HANGUL_WORD.test(last) ? stripParticle(last) : last].join(" ").toLowerCase();
      if (run.every((word) => PLAIN_WORD.test(word)) && synonyms()[phrase]) {
        out.push(...clauses(synonyms()[phrase]));
        break;
      }
    }
    if (length > 1) {
      i += length;
      continue;
    }
    out.push(...searchWord(typed[i++]));
  }
  return out.join(" ");
}
window.searchQuery = searchQuery;  // the browser tests read the query actually sent

// Material's worker, started from a small script that first mends lunr's word set. lunr 2.3.9 (the last release)
// merges the nodes of its word set that print alike, and prints a node as its edges' labels run together with the
// ids of the nodes they lead to. With digits for labels two different nodes can print alike ("7" to node 12 and
// "8" to node 3; "7" to node 1283): a search for the start of a word then lists words the index lacks, and the
// whole search fails ("Cannot read properties of undefined (reading '_index')", olivernn/lunr.js#314). On the
// Korean index every query with the word 0 failed so, since each search also asks for suggestions, which match
// words by their start. A comma after each id keeps the printed forms apart.
const WORKER = (material) => `
  const load = self.importScripts.bind(self);
  self.importScripts = (...urls) => load(...urls.map((url) => new URL(url, ${JSON.stringify(material)}).href));
  self.importScripts(${JSON.stringify(material)});
  self.lunr.TokenSet.prototype.toString = function () {
    let printed = this.final ? "1" : "0";
    for (const label of Object.keys(this.edges).sort()) printed += label + this.edges[label].id + ",";
    return printed;
  };
`;

const PageWorker = window.Worker;
window.Worker = class extends PageWorker {
  constructor(url, ...rest) {
    const material = new URL(url, document.baseURI).href;
    super(URL.createObjectURL(new Blob([WORKER(material)], { type: "text/javascript" })), ...rest);
  }

  postMessage(message, ...rest) {
    if (message && message.type === 0 && message.data?.docs) {  // 0: the index, set up once per page
      [index, vocabulary] = [message.data, null];
    }
    if (message && message.type === 2 && typeof message.data === "string") {  // 2: a query
      message = { ...message, data: searchQuery(message.data) };
    }
    super.postMessage(message, ...rest);
  }
};
