// Helpers shared by the node test scripts: TAP-ish result lines ("ok NAME" / "not ok NAME" and
// "# ..." diagnostics, renumbered by run.sh) and small assertions.
export async function test(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`not ok ${name}`);
    const text = String((e && e.stack) || e);
    console.log(text.split('\n').slice(0, 12).map((l) => `# ${l}`).join('\n'));
  }
}

export function eq(a, b, what) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${what}: got ${ja}, want ${jb}`);
}

export function check(cond, what) {
  if (!cond) throw new Error(what);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Parses an SSE body into the JSON of each data event; returns {events, done}.
export function parseSSE(text) {
  const events = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6))
      .join('\n');
    if (!data) continue;
    if (data === '[DONE]') done = true;
    else events.push(JSON.parse(data));
  }
  return { events, done };
}
