#include "client/cli/text_table.h"

#include <algorithm>
#include <utility>

namespace gpumux {

TextTable::TextTable(std::vector<std::string> headers)
    : headers_(std::move(headers)), right_(headers_.size(), false) {}

void TextTable::AlignRight(size_t column) {
  if (column < right_.size()) right_[column] = true;
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> widths(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = headers_[c].size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  auto render_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line.append(2, ' ');
      const size_t pad = widths[c] - cells[c].size();
      if (right_[c]) line.append(pad, ' ');
      line.append(cells[c]);
      if (!right_[c]) line.append(pad, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out.append(line).push_back('\n');
  };
  render_row(headers_);
  for (const auto& row : rows_) render_row(row);
  return out;
}

}  // namespace gpumux
