'use strict';
// Shared helpers for produce.js / consume.js (tidemq <-> ali-ons interop harness).
//
// Contract with the pytest suite:
//   * stdout carries JSON lines only; every log line (ours and ali-ons') goes to stderr;
//   * only loopback addresses are ever contacted (name server and brokers);
//   * exit codes: 0 success, 1 error (bad args, connection failure, client error), 2 timeout.

const net = require('net');
const util = require('util');

// Anything that would print to stdout is sent to stderr instead.
for (const m of [ 'log', 'info', 'debug' ]) {
  console[m] = (...args) => console.error(...args);
}

let exiting = false;

// Exit once stdout has been flushed (it is a pipe when driven by pytest).
function exit(code) {
  if (exiting) return;
  exiting = true;
  process.stdout.write('', () => process.exit(code));
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function fail(code, ...args) {
  console.error('[harness]', util.format(...args));
  exit(code);
}

// Parse argv against {name: {type, default, required}}; exits 1 with usage on error.
function parseArgs(spec, usage) {
  const options = {};
  for (const [ name, s ] of Object.entries(spec)) {
    options[name] = { type: s.type === 'boolean' ? 'boolean' : 'string' };
  }
  let values;
  try {
    ({ values } = util.parseArgs({ options, strict: true, allowPositionals: false }));
  } catch (err) {
    fail(1, `${err.message}\nusage: ${usage}`);
    return null;
  }
  const out = {};
  for (const [ name, s ] of Object.entries(spec)) {
    let v = values[name];
    if (v === undefined) {
      if (s.required) {
        fail(1, `missing --${name}\nusage: ${usage}`);
        return null;
      }
      v = s.default;
    } else if (s.type === 'int') {
      if (!/^\d+$/.test(v)) {
        fail(1, `--${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
        return null;
      }
      v = Number(v);
    }
    out[name] = v;
  }
  return out;
}

function isLoopback(host) {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

// Safety net: refuse every TCP connection to a non-loopback host. ali-ons connects to
// whatever broker address the name server hands out, so a server advertising a LAN
// address must fail loudly here instead of sending traffic off the machine.
function installLoopbackGuard() {
  const connect = net.connect;
  const guarded = function(...args) {
    const opts = typeof args[0] === 'object' && args[0] !== null ? args[0] : { port: args[0], host: args[1] };
    const host = opts.host || 'localhost';
    if (!opts.path && !isLoopback(host)) {
      const err = new Error(`[harness] refusing to connect to non-loopback address ${host}:${opts.port}`);
      console.error(err.message);
      throw err;
    }
    return connect.apply(this, args);
  };
  net.connect = guarded;
  net.createConnection = guarded;
}

function splitAddr(addr) {
  const m = /^([^:]+):(\d+)$/.exec(addr || '');
  if (!m) throw new Error(`bad address ${JSON.stringify(addr)}, expected HOST:PORT`);
  return { host: m[1], port: Number(m[2]) };
}

// Fail fast with a clear message when nothing listens at the name server address
// (ali-ons itself would only log and retry every 30 s).
function probe(addr, timeoutMs = 3000) {
  const { host, port } = splitAddr(addr);
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    const done = err => {
      sock.destroy();
      if (err) reject(new Error(`cannot connect to name server ${addr}: ${err.code || err.message}`));
      else resolve();
    };
    sock.setTimeout(timeoutMs, () => done(new Error(`timeout after ${timeoutMs} ms`)));
    sock.once('connect', () => done());
    sock.once('error', done);
  });
}

// Logger handed to ali-ons (it calls logger.info/warn/error with util.format arguments).
function makeLogger(verbose) {
  const line = tag => (...args) => console.error(`[ali-ons ${tag}]`, util.format(...args));
  return {
    debug() {},
    info: verbose ? line('INFO') : () => {},
    warn: line('WARN'),
    error: line('ERROR'),
  };
}

// Options common to Producer and Consumer. ali-ons asserts an `httpclient` even when
// `nameSrv` is set; it is only used to fetch the name-server list from the Aliyun
// address server, which `nameSrv` bypasses, so a stub that always throws is enough.
// No accessKey/secretKey: without both, ali-ons does not sign requests.
function clientOptions(args) {
  splitAddr(args.namesrv);
  return {
    nameSrv: args.namesrv,
    httpclient: {
      request() {
        throw new Error('[harness] HTTP name-server lookup is disabled');
      },
    },
    logger: makeLogger(args.verbose),
  };
}

// One-line description of an error (stack only with --verbose).
function describe(err, verbose) {
  if (!(err instanceof Error)) return String(err);
  if (verbose) return err.stack;
  return `${err.name}: ${err.message}` + (err.code !== undefined ? ` (code ${err.code})` : '');
}

function startTimeout(seconds, what) {
  const t = setTimeout(() => fail(2, `timeout after ${seconds} s: ${what()}`), seconds * 1000);
  return t;
}

process.on('unhandledRejection', err => {
  console.error('[harness] unhandled rejection:', err);
});

module.exports = {
  exit, emit, fail, describe, parseArgs, installLoopbackGuard, probe, clientOptions, startTimeout,
};
