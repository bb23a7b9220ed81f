// Loading YAML text for the project's input readers (decks, calibration files), with the parser's error
// turned into one InputError line that names the input and the position.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace minimllm {

// Every document of yaml_text; throws InputError "<origin>: line L, column C: invalid YAML: ...".
std::vector<YAML::Node> load_yaml_documents(const std::string& yaml_text, const std::string& origin);

}  // namespace minimllm
