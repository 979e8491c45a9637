/**
 * Canonical JSON and digests (spec: semantics.md section 2), byte for byte what the
 * Python worker computes: keys sorted by UTF-16 code units, no whitespace, strings and
 * numbers as JSON.stringify writes them after lone surrogates are removed, and an absent
 * value written as the bare word `undefined`.
 */
import { createHash } from "node:crypto";

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function jsonString(s: string): string {
  return JSON.stringify(s.replace(LONE_SURROGATE, ""));
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function write(v: unknown, out: string[]): void {
  if (v === undefined) {
    out.push("undefined");
  } else if (v === null) {
    out.push("null");
  } else if (typeof v === "string") {
    out.push(jsonString(v));
  } else if (typeof v === "number") {
    // Number#toString: 1.0 is 1, -0 is 0, 1e21 is 1e+21. NaN and the infinities never come
    // off the wire (JSON has none); they are written as the Python side writes them.
    out.push(Number.isFinite(v) ? String(v) : JSON.stringify(String(v)));
  } else if (typeof v === "boolean") {
    out.push(v ? "true" : "false");
  } else if (Array.isArray(v)) {
    out.push("[");
    v.forEach((item, i) => {
      if (i) out.push(",");
      write(item, out);
    });
    out.push("]");
  } else if (isObject(v)) {
    out.push("{");
    // The default sort compares UTF-16 code units, the order the spec asks for.
    Object.keys(v)
      .sort()
      .forEach((key, i) => {
        if (i) out.push(",");
        out.push(jsonString(key), ":");
        write(v[key], out);
      });
    out.push("}");
  } else {
    throw new TypeError(`cannot canonicalize a ${typeof v}`);
  }
}

/** Canonical JSON of a JSON value (as JSON.parse returns it); `undefined` is "undefined". */
export function canon(v: unknown): string {
  const out: string[] = [];
  write(v, out);
  return out.join("");
}

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** SHA-256 hex of the UTF-8 bytes of canon(v). */
export function digest(v: unknown): string {
  return sha256Hex(canon(v));
}

/**
 * A value as it crosses the wire: what the worker will decode from JSON.stringify's
 * output (undefined members dropped, NaN to null, toJSON applied; a bigint becomes its
 * decimal string). Hashing this, not the live object, keeps privacy mode equal to raw mode.
 */
export function toWire(v: unknown): unknown {
  if (v === undefined) return undefined;
  const text = JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
  return text === undefined ? undefined : JSON.parse(text);
}

export { isObject };
