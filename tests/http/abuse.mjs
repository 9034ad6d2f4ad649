// Abusive clients: slowloris headers, a partial body, garbage bytes, an oversized header, many
// idle connections, pipelined requests. None may crash the server or stall other clients, and
// stalled connections are closed after --http-timeout.
// Usage: node abuse.mjs http://127.0.0.1:PORT HTTP_TIMEOUT_S
import http from 'node:http';
import net from 'node:net';
import { test, eq, check, sleep } from './lib.mjs';

const base = process.argv[2];
const timeoutS = Number(process.argv[3]);
const { hostname, port } = new URL(base);

function open() {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: hostname, port: Number(port) }, () => resolve(s));
    s.on('error', reject);
  });
}

// Resolves with the bytes received when the server closes the socket (or null after ms).
function closedWithin(s, ms) {
  return new Promise((resolve) => {
    let got = '';
    const t = setTimeout(() => resolve(null), ms);
    s.on('data', (d) => { got += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(t); resolve(got); });
  });
}

// A fresh connection each time (no keep-alive pool), so that a pooled connection the server
// just closed for idleness cannot fail the request.
function normalRequest() {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 10, temperature: 0 });
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/completions`, {
      method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        try {
          eq(res.statusCode, 200, 'status of a normal request');
          eq(JSON.parse(data).choices[0].text, ', there was a little girl named Lily', 'text');
          resolve();
        } catch (e) { reject(e); }
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

await test('abuse: slowloris headers are cut off after the timeout; others are served meanwhile', async () => {
  const s = await open();
  s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
  const closed = closedWithin(s, (timeoutS + 10) * 1000);
  await normalRequest();
  check((await closed) !== null, 'the server closed the stalled connection');
});

await test('abuse: a partial body is cut off after the timeout; others are served meanwhile', async () => {
  const s = await open();
  s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"prompt":');
  const closed = closedWithin(s, (timeoutS + 10) * 1000);
  await normalRequest();
  check((await closed) !== null, 'the server closed the stalled connection');
});

await test('abuse: garbage bytes get an error or a close, not a crash', async () => {
  const s = await open();
  const closed = closedWithin(s, 15000);
  s.write(Buffer.from([0, 1, 2, 0xff, 0xfe, 13, 10, 71, 69, 84, 13, 10, 13, 10]));
  const got = await closed;
  check(got === null || got === '' || /^HTTP\/1\.[01] 4\d\d/.test(got), `answer: ${got && got.slice(0, 40)}`);
  s.destroy();
  await normalRequest();
});

await test('abuse: an oversized header block is refused; the server stays up', async () => {
  const s = await open();
  const closed = closedWithin(s, 15000);
  s.write(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(200000)}\r\n\r\n`);
  const got = await closed;
  check(got === null || got === '' || /^HTTP\/1\.[01] 4\d\d/.test(got), `answer: ${got && got.slice(0, 40)}`);
  s.destroy();
  await normalRequest();
});

await test('abuse: 100 idle connections do not stall a request', async () => {
  const socks = [];
  for (let i = 0; i < 100; i++) socks.push(await open());
  await normalRequest();
  for (const s of socks) s.destroy();
});

await test('abuse: two pipelined requests on one connection get two answers in order', async () => {
  const s = await open();
  let got = '';
  s.on('data', (d) => { got += d.toString(); });
  s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let i = 0; i < 100 && !got.includes('"object":"list"'); i++) await sleep(50);
  s.destroy();
  const answers = got.match(/HTTP\/1\.1 200/g) || [];
  eq(answers.length, 2, 'two 200 answers');
  check(got.indexOf('"status":"ok"') < got.indexOf('"object":"list"'), 'in order');
});

await test('abuse: HEAD answers carry no body, so a kept-alive connection stays in sync', async () => {
  const s = await open();
  let got = '';
  s.on('data', (d) => { got += d.toString(); });
  s.write('HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nHEAD /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n' +
          'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  for (let i = 0; i < 100 && !got.includes('"status":"ok"'); i++) await sleep(50);
  s.destroy();
  const heads = got.split(/(?=HTTP\/1\.1 )/);
  eq(heads.length, 3, `three answers: ${JSON.stringify(got.slice(0, 300))}`);
  check(/^HTTP\/1\.1 200[^]*Content-Length: 15\r\n[^]*\r\n\r\n$/.test(heads[0]), `HEAD /health: ${JSON.stringify(heads[0])}`);
  check(/^HTTP\/1\.1 405[^]*\r\n\r\n$/.test(heads[1]), `HEAD on a POST route: ${JSON.stringify(heads[1])}`);
  check(heads[2].startsWith('HTTP/1.1 200') && heads[2].endsWith('{"status":"ok"}'), 'the GET after them');
});
