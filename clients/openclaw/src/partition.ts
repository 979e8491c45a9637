/**
 * Kafka's default partitioner for keyed records, as its Java client computes it:
 * murmur2 (seed 0x9747b28c) of the key's UTF-8 bytes, made positive with & 0x7fffffff,
 * modulo the partition count. Gateways read the decisions partition of their own id;
 * events go to the partition of their run id, where the Python client puts them too.
 */

export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const length = data.length;
  let h = 0x9747b28c ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const rest = length & 3;
  if (rest === 3) h ^= data[whole + 2] << 16;
  if (rest >= 2) h ^= data[whole + 1] << 8;
  if (rest >= 1) {
    h ^= data[whole];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0; // a signed 32-bit int, as Java's Utils.murmur2 returns it
}

const encoder = new TextEncoder();

/** The partition Kafka's Java producer picks for this string key among `partitions`. */
export function partitionFor(key: string, partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1) {
    throw new RangeError(`partitions must be a positive integer, got ${partitions}`);
  }
  return (murmur2(encoder.encode(key)) & 0x7fffffff) % partitions;
}
