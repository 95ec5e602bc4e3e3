import { inflateSync } from 'node:zlib';

/**
 * Decodes an 8-bit RGB or RGBA PNG (what a browser screenshot is) far enough to tell a blank image
 * from a drawn one: the standard deviation of its luminance, 0 for a single colour.
 */
export function pngLuminanceDeviation(png: Buffer): {
  width: number;
  height: number;
  deviation: number;
} {
  if (png.subarray(1, 4).toString('latin1') !== 'PNG') throw new Error('not a PNG');
  let offset = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.subarray(offset + 4, offset + 8).toString('latin1');
    const data = png.subarray(offset + 8, offset + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const depth = data[8];
      const color = data[9];
      if (depth !== 8 || (color !== 2 && color !== 6) || data[12] !== 0) {
        throw new Error(
          `unsupported PNG (depth ${depth}, colour type ${color}, interlaced ${data[12]})`,
        );
      }
      channels = color === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      idat.push(data);
    }
    offset += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  let prev = Buffer.alloc(stride);
  let sum = 0;
  let sumSq = 0;
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? (line[i - channels] as number) : 0;
      const b = prev[i] as number;
      const c = i >= channels ? (prev[i - channels] as number) : 0;
      let add = 0;
      if (filter === 1) add = a;
      else if (filter === 2) add = b;
      else if (filter === 3) add = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        add = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      line[i] = ((line[i] as number) + add) & 0xff;
    }
    for (let x = 0; x < width; x++) {
      const p = x * channels;
      const lum =
        0.299 * (line[p] as number) +
        0.587 * (line[p + 1] as number) +
        0.114 * (line[p + 2] as number);
      sum += lum;
      sumSq += lum * lum;
    }
    prev = line;
  }
  const n = width * height;
  const mean = sum / n;
  return { width, height, deviation: Math.sqrt(Math.max(0, sumSq / n - mean * mean)) };
}
