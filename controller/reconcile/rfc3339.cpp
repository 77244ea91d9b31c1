#include "controller/reconcile/rfc3339.h"

#include <cctype>
#include <cstdio>

namespace tessera::reconcile {
namespace {

using namespace std::chrono;

std::string FormatDate(sys_seconds s) {
  const sys_days day = floor<days>(s);
  const year_month_day ymd{day};
  const hh_mm_ss<seconds> tod{s - day};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(tod.hours().count()), static_cast<int>(tod.minutes().count()),
                static_cast<int>(tod.seconds().count()));
  return buf;
}

// Reads exactly `n` digits at `pos` into `out`.
bool Digits(std::string_view text, size_t pos, size_t n, int& out) {
  if (pos + n > text.size())
    return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])))
      return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

}  // namespace

std::string FormatTime(TimePoint t) {
  return FormatDate(floor<seconds>(t)) + "Z";
}

std::string FormatMicroTime(TimePoint t) {
  const auto s = floor<seconds>(t);
  const auto us = duration_cast<microseconds>(t - s).count();
  char frac[32];
  std::snprintf(frac, sizeof(frac), ".%06lld", static_cast<long long>(us));
  return FormatDate(s) + frac + "Z";
}

std::optional<TimePoint> ParseTime(std::string_view text) {
  int y, mo, d, h, mi, s;
  if (!Digits(text, 0, 4, y) || text.size() < 20 || text[4] != '-' || !Digits(text, 5, 2, mo) ||
      text[7] != '-' || !Digits(text, 8, 2, d) || (text[10] != 'T' && text[10] != 't') ||
      !Digits(text, 11, 2, h) || text[13] != ':' || !Digits(text, 14, 2, mi) || text[16] != ':' ||
      !Digits(text, 17, 2, s)) {
    return std::nullopt;
  }
  const year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)},
                           day{static_cast<unsigned>(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || s > 60)
    return std::nullopt;
  size_t pos = 19;
  nanoseconds frac{0};
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t scale = 100000000;
    const size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      frac += nanoseconds((text[pos] - '0') * scale);
      scale /= 10;
      ++pos;
    }
    if (pos == start)
      return std::nullopt;
  }
  minutes offset{0};
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int oh, om;
    if (!Digits(text, pos + 1, 2, oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !Digits(text, pos + 4, 2, om)) {
      return std::nullopt;
    }
    if (oh > 23 || om > 59)
      return std::nullopt;
    offset = hours(oh) + minutes(om);
    if (text[pos] == '-')
      offset = -offset;
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != text.size())
    return std::nullopt;
  const sys_seconds utc = sys_days{ymd} + hours(h) + minutes(mi) + seconds(s) - offset;
  // The clock counts nanoseconds in an int64, from about 1678 to 2262: a time outside that
  // (a year 9999 in a status someone wrote) cannot be held, and converting it would overflow.
  if (utc < ceil<seconds>(TimePoint::min()) + days(1) ||
      utc > floor<seconds>(TimePoint::max()) - days(1))
    return std::nullopt;
  return time_point_cast<TimePoint::duration>(utc + frac);
}

}  // namespace tessera::reconcile
