# Writes a .cc file holding the text of a YAML file (the built-in default config).
file(READ "${INPUT}" CONTENT)
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} at build time; do not edit.\n"
  "namespace cputrain { const char* BuiltinConfigYaml() { return R\"cputrain_yaml(${CONTENT})cputrain_yaml\"; } }\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
