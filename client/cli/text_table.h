#pragma once

// A plain-text table for the CLI's human output: a header row, columns padded
// to their widest cell and two spaces apart, chosen columns right-aligned
// (numbers), no trailing spaces. Not thread-safe.

#include <string>
#include <vector>

namespace gpumux {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);

  void AlignRight(size_t column);
  // Missing cells render empty; extra cells are dropped.
  void AddRow(std::vector<std::string> cells);
  // The header and every row, each ending in '\n'.
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace gpumux
