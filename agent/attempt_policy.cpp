#include "agent/attempt_policy.h"

#include <cstdio>

namespace ddprun {

namespace {

// The view places this node elsewhere in its round than it runs now.
bool moved(const NodeView& view, const Placement& placement) {
  return view.placement.node_rank >= 0 && !(view.placement == placement);
}

}  // namespace

ViewNews news_of(const NodeView& view, int64_t round, uint32_t told_generation, const Placement& placement) {
  ViewNews n;
  if (!view.known || view.round != round) return n;
  n.tell_heals_come = true;
  if (view.heal_generation > told_generation) {
    n.heal = moved(view, placement) ? ViewNews::Heal::kMove : ViewNews::Heal::kHealWithOthers;
  }
  return n;
}

std::optional<HealAnswer> answer_of(const NodeView* view, uint64_t request, int64_t round, const Placement& placement) {
  if (!view || view->heal_request_id != request) return std::nullopt;
  HealAnswer a;
  a.generation = view->heal_request_generation;
  a.move = view->round == round && view->heal_generation == a.generation && moved(*view, placement);
  return a;
}

StragglerNews straggler_news_of(const NodeView& view, const StragglerRules& rules) {
  StragglerNews n;
  if (view.straggler_score <= 0) return n;
  n.verdict = StragglerNews::kKeep;
  if (!rules.replace_stragglers) {
    n.kept = "--straggler-action warn";
  } else if (rules.hosts_rendezvous) {
    n.kept = "this node hosts the rendezvous";
  } else if (view.nodes_waiting == 0 || !view.takeover_ready) {
    n.kept = "no waiting node would take its place";
  } else {
    n.verdict = StragglerNews::kHandOver;
  }
  return n;
}

bool hand_over_now(bool handed_over, std::optional<bool> all_in_collective) {
  return !handed_over && all_in_collective.value_or(false);
}

std::string score_text(double score) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.2f", score);
  return buf;
}

}  // namespace ddprun
