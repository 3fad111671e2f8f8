// Reference GPT-2 token ids for tests/tokenizer_test.cc, from the npm package gpt-3-encoder:
// the encoder the C++ one must match id for id.
//
//   node encode_js.js <gpt-3-encoder dir> <in.json> <out.json>
//
// in.json is an array of strings (documents); out.json gets an array of arrays of ids, one per
// document. It also writes {"unicode": ...}: the Unicode version of this node's regex tables.
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, input, output] = process.argv.slice(2);
if (!pkg || !input || !output) {
  console.error('usage: node encode_js.js <gpt-3-encoder dir> <in.json> <out.json>');
  process.exit(2);
}
const {encode} = require(path.resolve(pkg, 'Encoder.js'));
const docs = JSON.parse(fs.readFileSync(input, 'utf-8'));
const ids = docs.map((d) => encode(d));
fs.writeFileSync(output, JSON.stringify({unicode: process.versions.unicode, ids}));
